"""One owner per vocabulary: every audit event's action is a member of
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


# --- the rollout plan: deployments/rollout_machine.py's Plan owns its defaults and the steps rule ---
PLAN_FIELDS = ("shadow_seconds", "step_min_seconds", "step_min_requests", "step_deadline_seconds")
PLAN_OWNER = ROOT / "deployments" / "rollout_machine.py"


def _literal_number(node) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) in (int, float)


def _plan_default_copies(tree: ast.AST):
    """Lines where a plan value gets a default written as a number instead of read from the Plan:
    a parameter default, a form/serializer/model field's default= or initial=, a dict .get fallback."""
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            args = node.args
            positional = args.posonlyargs + args.args
            pairs = list(zip(positional[len(positional) - len(args.defaults) :], args.defaults))
            pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None]
            yield from (d.lineno for a, d in pairs if a.arg in PLAN_FIELDS and _literal_number(d))
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            if any(isinstance(t, ast.Name) and t.id in PLAN_FIELDS for t in node.targets):
                kws = node.value.keywords
                yield from (k.lineno for k in kws if k.arg in ("default", "initial") and _literal_number(k.value))
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "get" and len(node.args) == 2:
            key, fallback = node.args
            if isinstance(key, ast.Constant) and key.value in PLAN_FIELDS and _literal_number(fallback):
                yield fallback.lineno


def test_the_plan_defaults_are_written_once():
    copies = []
    for folder in ("deployments", "monitoring", "experiments"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "migrations" in path.parts or path == PLAN_OWNER:
                continue
            tree = ast.parse(path.read_text(), filename=str(path))
            copies += [f"{path.relative_to(ROOT)}:{line}" for line in _plan_default_copies(tree)]
    assert not copies, f"plan defaults written as numbers (read them from DEFAULT_PLAN): {copies}"


def test_the_check_finds_a_copied_default():
    tree = ast.parse(
        "def f(*, step_min_seconds=30.0): pass\n"
        "class S:\n    step_min_requests = serializers.IntegerField(default=200)\n"
        "x = options.get('step_deadline_seconds', 600.0)\n"
    )
    assert sorted(_plan_default_copies(tree)) == [1, 3, 4]


def test_the_cli_says_the_plans_defaults():
    """The CLI imports nothing of the server (an import contract), so it keeps the values it
    shows in --help; they are the Plan's."""
    from deployments.rollout_machine import DEFAULT_PLAN
    from modelplane_cli.commands.rollouts import PLAN_DEFAULTS

    assert PLAN_DEFAULTS == {name: getattr(DEFAULT_PLAN, name) for name in PLAN_DEFAULTS}
    assert set(PLAN_DEFAULTS) == {"steps_bp", "step_min_seconds", "step_min_requests", "step_deadline_seconds"}


@pytest.mark.parametrize("text", ["10,25,50,100", "0.5,100", "5", "0,50", "50,25", "25,25", "101", "-5,10", "10,120"])
def test_the_cli_steps_rule_is_the_plans(text):
    from deployments.rollout_machine import Plan
    from modelplane_cli.commands.rollouts import parse_steps
    from modelplane_cli.exits import CliError

    problem = Plan.steps_problem([float(p) * 100 for p in text.split(",")])
    try:
        parse_steps(text)
    except CliError:
        assert problem is not None, f"the CLI refuses {text!r}, the plan takes it"
    else:
        assert problem is None, f"the CLI takes {text!r}, the plan refuses it ({problem})"


def test_variant_roles_are_the_route_tables():
    """deployments owns the roles; the gateway's schema (no Django import) keeps the same words,
    in each place it names them (tensor and LLM variants)."""
    import json

    from deployments.rollout_machine import VariantRole

    schema = json.loads((ROOT / "gateway" / "contracts" / "route_table.schema.json").read_text())
    roles = []

    def find(node):
        if isinstance(node, dict):
            if "role" in node.get("properties", {}):
                roles.append(sorted(node["properties"]["role"]["enum"]))
            for value in node.values():
                find(value)
        elif isinstance(node, list):
            for value in node:
                find(value)

    find(schema)
    assert len(roles) == 2 and all(enum == sorted(VariantRole) for enum in roles)


def test_the_arm_judge_says_every_guardrail_status_and_the_results_schema_lists_them():
    from experiments.analysis import ArmDecision
    from experiments.api.results_schema import DECISIONS, GUARDRAIL_STATUS
    from monitoring.judge.evidence import GuardrailStatus
    from monitoring.services.arm_guardrails import STATUS

    assert set(STATUS.values()) == set(GuardrailStatus)
    assert GUARDRAIL_STATUS == ["pass", "pending", "fail"] and DECISIONS == ["ship", "stop", "continue", "blocked"]
    assert set(DECISIONS) == set(ArmDecision)
