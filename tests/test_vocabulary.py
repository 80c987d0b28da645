"""One owner per vocabulary (issue 23): every audit event's action is a member of
registry.models.EventAction, read from the code itself (like test_architecture), and every
member is written by some service, so the enum is exactly the trail's vocabulary."""

import ast
from pathlib import Path

import pytest

from registry.models import EventAction

ROOT = Path(__file__).resolve().parents[1]
CODE = ("kernel", "config", "registry", "deployments", "monitoring", "experiments", "bench", "harness")


def _event_record_calls():
    for folder in CODE:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                name = getattr(node, "func", None)
                name = getattr(name, "id", None) or getattr(name, "attr", None)
                if isinstance(node, ast.Call) and name == "event_record":
                    yield f"{path.relative_to(ROOT)}:{node.lineno}", node


CALLS = list(_event_record_calls())


def _action(call: ast.Call) -> str | None:
    """The member name an `action=EventAction.NAME` keyword names, else None."""
    for keyword in call.keywords:
        value = keyword.value
        if (
            keyword.arg == "action"
            and isinstance(value, ast.Attribute)
            and isinstance(value.value, ast.Name)
            and value.value.id == "EventAction"
        ):
            return value.attr
    return None


def test_the_services_record_events():
    assert len(CALLS) >= 40  # the walk found the services (a wrong root would find none)


@pytest.mark.parametrize("where,call", CALLS, ids=[where for where, _ in CALLS])
def test_every_event_record_names_an_event_action(where, call):
    member = _action(call)
    assert member is not None, f"{where}: event_record(action=...) must be EventAction.<NAME>"
    assert member in EventAction.__members__, f"{where}: EventAction has no {member}"


def test_every_event_action_is_recorded_somewhere():
    used = {_action(call) for _, call in CALLS}
    unused = sorted(set(EventAction.__members__) - used)
    assert not unused, f"EventAction members no service records (remove them or record them): {unused}"


def test_event_record_refuses_a_plain_string():
    from registry.services.events import event_record

    with pytest.raises(TypeError, match="'transition' is not an EventAction"):
        event_record(actor=None, obj=object(), action="transition")
