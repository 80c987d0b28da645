"""Login lockout by username and client address: wrong passwords from one
address lock that address out for that username, never the username everywhere; behind a
proxy the client's address comes from X-Forwarded-For only when the connection is from a
trusted proxy (TRUSTED_PROXIES), so nobody picks the address they are locked under; and
TRUSTED_ADMIN_NETWORKS are never locked out, so an admin can always log in from there."""

import pytest
from django.core.management import call_command
from django.test import Client

from config.client_ip import parse_networks
from harness import factories

pytestmark = pytest.mark.django_db

PASSWORD = "pw-for-tests-only"


@pytest.fixture
def admin(db):
    return factories.user("admin", staff=True)


def _login(password, **meta):
    return Client(**meta).post("/login/", {"username": "admin", "password": password})


def _lock_out(settings, **meta):
    for _ in range(settings.AXES_FAILURE_LIMIT):
        _login("guess", **meta)
    assert _login(PASSWORD, **meta).status_code == 429  # locked: the right password too


def test_wrong_passwords_from_one_address_lock_that_address_only(admin, settings):
    _lock_out(settings, REMOTE_ADDR="198.51.100.10")
    assert _login(PASSWORD, REMOTE_ADDR="198.51.100.20").status_code == 302  # the admin, from elsewhere
    # a forged X-Forwarded-For from an untrusted peer changes nothing: not an escape, not a weapon
    forged = {"REMOTE_ADDR": "198.51.100.10", "HTTP_X_FORWARDED_FOR": "203.0.113.9"}
    assert _login(PASSWORD, **forged).status_code == 429
    assert _login(PASSWORD, REMOTE_ADDR="203.0.113.9").status_code == 302


def test_behind_a_trusted_proxy_each_client_is_locked_alone(admin, settings):
    settings.TRUSTED_PROXIES = parse_networks("TRUSTED_PROXIES", ["10.0.0.0/24"])
    attacker = {"REMOTE_ADDR": "10.0.0.5", "HTTP_X_FORWARDED_FOR": "192.0.2.66"}
    _lock_out(settings, **attacker)
    # the admin comes through the same proxy (two hops: an inner proxy of ours appended too)
    admin_path = {"REMOTE_ADDR": "10.0.0.5", "HTTP_X_FORWARDED_FOR": "198.51.100.7, 10.0.0.9"}
    assert _login(PASSWORD, **admin_path).status_code == 302
    # a client cannot claim the attacker's address is someone else's: the rightmost untrusted hop counts
    spoof = {"REMOTE_ADDR": "10.0.0.5", "HTTP_X_FORWARDED_FOR": "198.51.100.7, 192.0.2.66"}
    assert _login(PASSWORD, **spoof).status_code == 429


def test_trusted_admin_networks_are_never_locked_out_and_an_operator_can_unlock(admin, settings):
    settings.TRUSTED_ADMIN_NETWORKS = parse_networks("TRUSTED_ADMIN_NETWORKS", ["172.16.0.0/12"])
    for _ in range(settings.AXES_FAILURE_LIMIT + 2):
        assert _login("guess", REMOTE_ADDR="172.16.4.4").status_code == 200
    assert _login(PASSWORD, REMOTE_ADDR="172.16.4.4").status_code == 302
    _lock_out(settings, REMOTE_ADDR="198.51.100.10")
    call_command("axes_reset_username", "admin")  # README: the other way back in
    assert _login(PASSWORD, REMOTE_ADDR="198.51.100.10").status_code == 302


def test_a_bad_network_setting_names_itself():
    with pytest.raises(ValueError, match="TRUSTED_PROXIES: 'nope'"):
        parse_networks("TRUSTED_PROXIES", ["nope"])
