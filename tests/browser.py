"""Browser helpers shared by the Playwright tests."""


def login(page, base_url: str, username: str) -> None:
    page.goto(f"{base_url}/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", "pw-for-tests-only")
    page.click("button[type=submit]")
    page.wait_for_load_state()


def wait_until(page, expression: str, *, arg=None, timeout: float = 30_000) -> None:
    """Poll a JavaScript expression (or an arrow function) in the page until it is truthy.
    Like Playwright's wait_for_function, but through page.evaluate: the page's
    Content-Security-Policy (kernel/csp.py: no eval) refuses the predicate
    wait_for_function compiles inside the page, and these tests run under that policy."""
    import time

    deadline = time.monotonic() + timeout / 1000
    while True:
        if page.evaluate(expression, arg):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"not true within {timeout / 1000:g} s: {expression}")
        time.sleep(0.1)


OVERFLOW = """() => {
  const width = window.innerWidth, out = [];
  for (const el of document.querySelectorAll('body *')) {
    const box = el.getBoundingClientRect();
    if (box.width && box.right > width + 1 && !el.closest('.scroll-x, table')) {
      out.push(`${el.tagName.toLowerCase()}${el.id ? '#' + el.id : ''}.${el.className || ''} right ${Math.round(box.right)}`);
    }
  }
  return {scroll: document.documentElement.scrollWidth, width, elements: out.slice(0, 8)};
}"""


def overflow(page) -> dict:
    """What sticks out past the viewport (outside a scrolling table): {} when nothing does."""
    seen = page.evaluate(OVERFLOW)
    return {} if seen["scroll"] <= seen["width"] else seen
