"""The YAML registry: the shipped file loads, and every kind of broken file is reported by path."""

from __future__ import annotations

import copy
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.paths import REGISTRY as SHIPPED

from toolloop_cli.errors import RegistryError
from toolloop_cli.examples import refunds
from toolloop_cli.tools.registry import check_registry, load_registry

GET_ORDER: dict[str, Any] = {
    "schema_version": "get-order-v1",
    "description": "Look up an order by id",
    "risk": "read",
    "timeout_ms": 500,
    "handler": "toolloop_cli.examples.refunds:get_order",
    "parameters": {
        "type": "object",
        "properties": {"order_id": {"type": "string", "pattern": "^ord_[0-9]+$"}},
        "required": ["order_id"],
        "additionalProperties": False,
    },
}
SUBMIT: dict[str, Any] = {
    "schema_version": "submit-refund-v1",
    "description": "Submit a refund",
    "risk": "irreversible",
    "handler": "toolloop_cli.examples.refunds:submit_refund",
    "reconcile": "toolloop_cli.examples.refunds:lookup_refund",
    "approval": "always",
    "idempotency": {"key_fields": ["order_id", "amount_cents"]},
    "parameters": {
        "type": "object",
        "properties": {"order_id": {"type": "string"}, "amount_cents": {"type": "integer"}},
        "required": ["order_id", "amount_cents"],
        "additionalProperties": False,
    },
}


def minimal_doc() -> dict[str, Any]:
    return {
        "registry": "test",
        "revision": "r1",
        "policy": {"revision": "pol-1", "approvers": ["ops-lead"]},
        "tools": {"get_order": copy.deepcopy(GET_ORDER), "submit_refund": copy.deepcopy(SUBMIT)},
    }


def write(tmp_path: Path, content: dict[str, Any] | str, name: str = "registry.yaml") -> Path:
    path = tmp_path / name
    text = content if isinstance(content, str) else yaml.safe_dump(content, sort_keys=False)
    path.write_text(text, encoding="utf-8")
    return path


def problem_paths(path: Path) -> list[str]:
    return [where for where, _ in check_registry(path)]


def test_shipped_refunds_registry_loads_with_its_policy_and_tools_in_file_order() -> None:
    registry = load_registry(SHIPPED)
    assert registry.name == "refunds"
    assert registry.revision == "2026-12-01.1"
    assert registry.policy.revision == "pol-3"
    assert registry.policy.approvers == ("ops-lead", "finance")
    assert registry.policy.approval_ttl_s == 3600
    assert registry.policy.forbid_self_approval is True
    assert list(registry.tools) == ["get_order", "create_refund_draft", "submit_refund"]
    submit = registry.tools["submit_refund"]
    assert submit.handler is refunds.submit_refund
    assert submit.reconcile is refunds.lookup_refund
    assert submit.risk == "irreversible" and submit.side_effecting
    assert submit.approval == "always"
    assert submit.key_fields == ("order_id", "amount_cents")
    assert submit.result_schema is not None
    get_order = registry.tools["get_order"]
    assert not get_order.side_effecting
    assert get_order.max_result_bytes == 8192
    assert get_order.timeout_ms == 500
    assert registry.sha256.startswith("sha256:") and get_order.sha256.startswith("sha256:")
    assert check_registry(SHIPPED) == []


def test_tool_specs_declare_name_description_and_parameters_in_registry_order() -> None:
    registry = load_registry(SHIPPED)
    specs = registry.tool_specs()
    assert [s.name for s in specs] == ["get_order", "create_refund_draft", "submit_refund"]
    assert specs[0].parameters == registry.tools["get_order"].parameters
    assert specs[2].description == registry.tools["submit_refund"].description


def test_get_is_an_exact_lookup_without_normalisation() -> None:
    registry = load_registry(SHIPPED)
    assert registry.get("get_order") is registry.tools["get_order"]
    for wrong in ("Get_Order", "get-order", " get_order", "get_order ", "__class__", "tools"):
        assert registry.get(wrong) is None


def test_defaults_are_applied_when_keys_are_omitted(tmp_path: Path) -> None:
    doc = minimal_doc()
    doc["defaults"] = {"max_turns": 12}
    registry = load_registry(write(tmp_path, doc))
    submit = registry.tools["submit_refund"]
    assert submit.timeout_ms == 5000
    assert submit.max_result_bytes == 65536 and submit.max_argument_bytes == 65536
    assert submit.sequential is False
    assert registry.tools["get_order"].approval == "never"
    assert registry.policy.approval_ttl_s == 3600 and registry.policy.forbid_self_approval
    assert registry.defaults == {"max_turns": 12}


def test_yaml_syntax_error_is_one_problem_at_the_document_with_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, "registry: x\ntools: [unclosed\npolicy: {}\n")
    problems = check_registry(path)
    assert len(problems) == 1
    where, message = problems[0]
    assert where == ""
    assert message.startswith("invalid YAML at line 3")


def test_document_that_is_not_a_mapping_is_a_problem(tmp_path: Path) -> None:
    assert check_registry(write(tmp_path, "- a\n- b\n")) == [
        ("", "the document must be a mapping, but it is a list")
    ]
    assert check_registry(write(tmp_path, "", name="empty.yaml")) == [
        ("", "the document must be a mapping, but it is empty")
    ]


def test_missing_handler_module_is_reported_at_the_handler_path(tmp_path: Path) -> None:
    doc = minimal_doc()
    doc["tools"]["get_order"]["handler"] = "no_such_module_xyz.sub:get_order"
    problems = check_registry(write(tmp_path, doc))
    assert problems == [
        ("tools.get_order.handler", "cannot import module 'no_such_module_xyz.sub'")
    ]


def test_missing_function_is_reported_at_the_handler_path(tmp_path: Path) -> None:
    doc = minimal_doc()
    doc["tools"]["get_order"]["handler"] = "toolloop_cli.examples.refunds:no_such_function"
    assert check_registry(write(tmp_path, doc)) == [
        (
            "tools.get_order.handler",
            "module 'toolloop_cli.examples.refunds' has no function 'no_such_function'",
        )
    ]


def test_handler_that_is_not_callable_or_not_an_import_path_is_a_problem(tmp_path: Path) -> None:
    doc = minimal_doc()
    doc["tools"]["get_order"]["handler"] = "toolloop_cli.examples.refunds:_SEED"
    doc["tools"]["submit_refund"]["reconcile"] = "toolloop_cli.examples.refunds.lookup_refund"
    problems = dict(check_registry(write(tmp_path, doc)))
    assert problems["tools.get_order.handler"] == (
        "'toolloop_cli.examples.refunds:_SEED' is not callable"
    )
    assert problems["tools.submit_refund.reconcile"] == ("must be an import path 'module:function'")


def test_module_that_raises_on_import_is_a_problem_with_the_exception_text(
    tmp_path: Path, fresh_module: str
) -> None:
    (tmp_path / f"{fresh_module}.py").write_text("raise RuntimeError('ledger offline')\n")
    doc = minimal_doc()
    doc["tools"]["get_order"]["handler"] = f"{fresh_module}:get_order"
    [(where, message)] = check_registry(write(tmp_path, doc))
    assert where == "tools.get_order.handler"
    assert "RuntimeError: ledger offline" in message


def test_unknown_risk_is_reported_at_the_risk_path(tmp_path: Path) -> None:
    doc = minimal_doc()
    doc["tools"]["get_order"]["risk"] = "dangerous"
    assert check_registry(write(tmp_path, doc)) == [
        ("tools.get_order.risk", "must be one of read, write, irreversible")
    ]


def test_invalid_json_schema_is_reported_inside_the_parameters(tmp_path: Path) -> None:
    doc = minimal_doc()
    doc["tools"]["get_order"]["parameters"]["properties"]["order_id"]["type"] = "text"
    [(where, message)] = check_registry(write(tmp_path, doc))
    assert where == "tools.get_order.parameters.properties.order_id.type"
    assert message.startswith("invalid JSON Schema:")


def test_parameters_must_be_an_object_schema(tmp_path: Path) -> None:
    doc = minimal_doc()
    doc["tools"]["get_order"]["parameters"] = {"type": "array"}
    assert check_registry(write(tmp_path, doc)) == [
        ("tools.get_order.parameters.type", "must be 'object'")
    ]


def test_invalid_result_schema_is_reported_at_its_path(tmp_path: Path) -> None:
    doc = minimal_doc()
    doc["tools"]["submit_refund"]["result_schema"] = {"type": "object", "required": "refund_id"}
    [(where, message)] = check_registry(write(tmp_path, doc))
    assert where == "tools.submit_refund.result_schema.required"
    assert message.startswith("invalid JSON Schema:")


def test_duplicate_tool_name_is_reported_not_silently_overwritten(tmp_path: Path) -> None:
    text = yaml.safe_dump(minimal_doc(), sort_keys=False)
    second = yaml.safe_dump({"get_order": GET_ORDER}, sort_keys=False)
    text += "".join("  " + line + "\n" for line in second.splitlines())
    problems = check_registry(write(tmp_path, text))
    lines = text.splitlines()
    second_at = len(lines) - lines[::-1].index("  get_order:")  # 1-based: the repeat
    assert [m for w, m in problems if w == "tools.get_order"] == [
        f"duplicate key at line {second_at}"
    ]
    with pytest.raises(RegistryError):
        load_registry(tmp_path / "registry.yaml")


def test_duplicate_nested_key_is_reported_with_its_full_path(tmp_path: Path) -> None:
    text = yaml.safe_dump(minimal_doc(), sort_keys=False).replace(
        "    risk: read\n", "    risk: read\n    risk: write\n"
    )
    problems = check_registry(write(tmp_path, text))
    assert ("tools.get_order.risk", "duplicate key at line 12") in problems


def test_a_key_repeated_with_the_same_value_is_still_a_duplicate_in_a_registry(
    tmp_path: Path,
) -> None:
    """A registry is toolloop's own file: every repeat is reported, even of the same value."""
    text = yaml.safe_dump(minimal_doc(), sort_keys=False).replace(
        "    risk: read\n", "    risk: read\n    risk: read\n"
    )
    assert any(w == "tools.get_order.risk" for w, _ in check_registry(write(tmp_path, text)))


def test_unknown_keys_are_reported_at_every_level(tmp_path: Path) -> None:
    doc = minimal_doc()
    doc["owner"] = "payments"
    doc["policy"]["quorum"] = 2
    doc["tools"]["get_order"]["retries"] = 3
    doc["tools"]["submit_refund"]["idempotency"]["ttl"] = 10
    assert sorted(check_registry(write(tmp_path, doc))) == [
        ("owner", "unknown key"),
        ("policy.quorum", "unknown key"),
        ("tools.get_order.retries", "unknown key"),
        ("tools.submit_refund.idempotency.ttl", "unknown key"),
    ]


def test_key_field_that_is_not_a_declared_property_is_a_problem(tmp_path: Path) -> None:
    doc = minimal_doc()
    doc["tools"]["submit_refund"]["idempotency"]["key_fields"] = ["order_id", "amount"]
    assert check_registry(write(tmp_path, doc)) == [
        (
            "tools.submit_refund.idempotency.key_fields[1]",
            "'amount' is not a declared property in parameters",
        )
    ]


def test_missing_required_keys_and_bad_values_are_each_reported(tmp_path: Path) -> None:
    doc = minimal_doc()
    del doc["revision"]
    doc["tools"]["get_order"]["description"] = 5
    doc["tools"]["get_order"]["timeout_ms"] = 0
    doc["tools"]["get_order"]["max_result_bytes"] = True
    doc["tools"]["submit_refund"]["approval"] = "sometimes"
    doc["tools"]["submit_refund"]["sequential"] = "yes please"
    doc["policy"]["approval_ttl_s"] = -5
    assert sorted(check_registry(write(tmp_path, doc))) == [
        (
            "policy.approval_ttl_s",
            "must be a positive integer of at most 315360000 (seconds: 10 years)",
        ),
        ("revision", "required key is missing"),
        ("tools.get_order.description", "must be a string (it may be empty)"),
        ("tools.get_order.max_result_bytes", "must be a positive integer"),
        ("tools.get_order.timeout_ms", "must be a positive integer"),
        ("tools.submit_refund.approval", "must be one of never, always"),
        ("tools.submit_refund.sequential", "must be true or false"),
    ]


def test_an_argument_cap_over_the_ceiling_is_a_problem(tmp_path: Path) -> None:
    doc = minimal_doc()
    doc["tools"]["get_order"]["max_argument_bytes"] = (1 << 20) + 1
    assert check_registry(write(tmp_path, doc)) == [
        (
            "tools.get_order.max_argument_bytes",
            "must be a positive integer of at most 1048576 (1 MiB)",
        )
    ]
    doc["tools"]["get_order"]["max_argument_bytes"] = 1 << 20
    assert check_registry(write(tmp_path, doc, name="at_the_ceiling.yaml")) == []


def test_bad_tool_name_and_empty_tools_are_problems(tmp_path: Path) -> None:
    doc = minimal_doc()
    doc["tools"]["get order!"] = doc["tools"].pop("get_order")
    assert ("tools.get order!", "tool name must match ^[A-Za-z_][A-Za-z0-9_-]{0,63}$") in (
        check_registry(write(tmp_path, doc))
    )
    doc["tools"] = {}
    assert check_registry(write(tmp_path, doc, name="empty_tools.yaml")) == [
        ("tools", "must be a non-empty mapping of tool names to tools")
    ]


def test_approval_always_without_any_approver_is_a_problem(tmp_path: Path) -> None:
    doc = minimal_doc()
    doc["policy"]["approvers"] = []
    assert check_registry(write(tmp_path, doc)) == [
        ("policy.approvers", "is empty, but submit_refund needs approval")
    ]


def test_approvers_that_are_not_names_are_one_problem_not_also_empty(tmp_path: Path) -> None:
    """Repeated, numeric or null approvers: the list is named once as what it must be; it
    was named a second time as "is empty", which it is not."""
    doc = minimal_doc()
    doc["policy"]["approvers"] = ["ops-lead", "ops-lead", 5, None]
    assert check_registry(write(tmp_path, doc)) == [
        ("policy.approvers", "must be a list of distinct non-empty strings")
    ]


def test_values_without_a_json_form_are_problems(tmp_path: Path) -> None:
    text = yaml.safe_dump(minimal_doc(), sort_keys=False) + "defaults:\n  limit: .nan\n  7: x\n"
    assert sorted(check_registry(write(tmp_path, text))) == [
        ("defaults.7", "keys must be strings"),
        ("defaults.limit", "nan is not a JSON number"),
    ]


def test_unquoted_dates_are_read_as_text_not_rejected(tmp_path: Path) -> None:
    text = yaml.safe_dump(minimal_doc(), sort_keys=False).replace(
        "revision: r1", "revision: 2026-12-01"
    )
    assert load_registry(write(tmp_path, text)).revision == "2026-12-01"


def test_several_problems_are_reported_together_and_raised_together(tmp_path: Path) -> None:
    doc = minimal_doc()
    doc["tools"]["get_order"]["risk"] = "dangerous"
    doc["tools"]["get_order"]["handler"] = "no_such_module_xyz:get_order"
    doc["tools"]["submit_refund"]["parameters"]["type"] = "list"
    path = write(tmp_path, doc)
    expected = {
        "tools.get_order.risk",
        "tools.get_order.handler",
        "tools.submit_refund.parameters.type",
    }
    assert set(problem_paths(path)) == expected
    with pytest.raises(RegistryError) as raised:
        load_registry(path)
    assert raised.value.problems == check_registry(path)
    assert raised.value.path == str(path)


def test_handler_module_beside_the_registry_file_is_found_and_sys_path_restored(
    tmp_path: Path, fresh_module: str
) -> None:
    (tmp_path / f"{fresh_module}.py").write_text(
        "def ping(arguments, context):\n    return {'pong': arguments['order_id']}\n"
    )
    doc = minimal_doc()
    doc["tools"]["get_order"]["handler"] = f"{fresh_module}:ping"
    path_before = list(sys.path)
    registry = load_registry(write(tmp_path, doc))
    assert sys.path == path_before
    handler = registry.tools["get_order"].handler
    assert handler({"order_id": "ord_1"}, None) == {"pong": "ord_1"}  # type: ignore[arg-type]


def test_hash_ignores_key_order_and_formatting_but_not_schema_changes(tmp_path: Path) -> None:
    doc = minimal_doc()
    block = write(tmp_path, doc, name="block.yaml")
    reordered = dict(reversed(list(doc.items())))
    reordered["tools"] = {n: dict(reversed(list(t.items()))) for n, t in doc["tools"].items()}
    flow = tmp_path / "flow.yaml"
    flow.write_text("# comment\n" + yaml.safe_dump(reordered, default_flow_style=True, width=60))
    first, second = load_registry(block), load_registry(flow)
    assert block.read_text() != flow.read_text()
    assert first.sha256 == second.sha256
    for name in first.tools:
        assert first.tools[name].sha256 == second.tools[name].sha256

    doc["tools"]["get_order"]["parameters"]["properties"]["order_id"]["maxLength"] = 20
    changed = load_registry(write(tmp_path, doc, name="changed.yaml"))
    assert changed.sha256 != first.sha256
    assert changed.tools["get_order"].sha256 != first.tools["get_order"].sha256
    assert changed.tools["submit_refund"].sha256 == first.tools["submit_refund"].sha256


def test_unreadable_file_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    [(where, message)] = check_registry(tmp_path / "missing.yaml")
    assert where == "" and message.startswith("cannot read the registry file")


@pytest.fixture
def fresh_module() -> Any:
    """A module name no other test uses, removed from ``sys.modules`` afterwards."""
    name = f"tl_test_handlers_{uuid.uuid4().hex}"
    yield name
    sys.modules.pop(name, None)


@pytest.mark.parametrize(
    ("defaults", "where"),
    [
        ({"max_turns": -5}, "defaults.max_turns"),
        ({"max_turns": 0}, "defaults.max_turns"),
        ({"max_turns": "20"}, "defaults.max_turns"),  # no coercion of a quoted number
        ({"bogus": 1}, "defaults.bogus"),
        ({"deadline_s": 10**12}, "defaults.deadline_s"),  # past what a timestamp can hold
        ({"max_calls_per_tool": {"nosuch": 3}}, "defaults.max_calls_per_tool.nosuch"),
    ],
)
def test_check_reports_the_defaults_a_run_would_refuse(
    tmp_path: Path, defaults: dict[str, Any], where: str
) -> None:
    """``registry check`` and a run agree: defaults a run refuses are problems at their path."""
    doc = minimal_doc()
    doc["defaults"] = defaults
    assert problem_paths(write(tmp_path, doc)) == [where]


def test_usable_defaults_and_per_tool_limits_of_its_own_tools_pass(tmp_path: Path) -> None:
    doc = minimal_doc()
    doc["defaults"] = {"max_turns": 8, "deadline_s": 600, "max_calls_per_tool": {"get_order": 3}}
    assert check_registry(write(tmp_path, doc)) == []


@pytest.mark.parametrize("ttl", [10**12, 10 * 365 * 86_400 + 1, 0])
def test_an_approval_lifetime_beyond_ten_years_or_not_positive_is_a_problem(
    tmp_path: Path, ttl: int
) -> None:
    doc = minimal_doc()
    doc["policy"]["approval_ttl_s"] = ttl
    assert problem_paths(write(tmp_path, doc)) == ["policy.approval_ttl_s"]


def test_a_problem_of_the_whole_file_is_named_without_an_empty_path(tmp_path: Path) -> None:
    """A problem with no YAML path (the file cannot be read) reads "registry F: what", not
    "registry F: : what"."""
    missing = tmp_path / "missing.yaml"
    with pytest.raises(RegistryError) as raised:
        load_registry(missing)
    assert str(raised.value).startswith(f"registry {missing}: cannot read the registry file")
