"""Browser helpers shared by the Playwright tests."""


def login(page, base_url: str, username: str) -> None:
    page.goto(f"{base_url}/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", "pw-for-tests-only")
    page.click("button[type=submit]")
    page.wait_for_load_state()
