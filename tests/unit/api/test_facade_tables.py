"""The facade's tables stay one: views follow their records, the error table is complete,
the OpenAPI document is valid and every alias names a method."""

from __future__ import annotations

from openapi_spec_validator import validate as validate_openapi

from trainee import errors
from trainee.api.loop_methods import HIDDEN_SESSION_FIELDS, RoundView, SessionView
from trainee.api.openapi import build_openapi
from trainee.api.routes import ALIASES
from trainee.api.table import registry
from trainee.store.records import RoundRecord, SessionRecord


def test_the_views_have_every_field_of_their_records_but_the_hidden_ones() -> None:
    shown = set(SessionRecord.__struct_fields__) - HIDDEN_SESSION_FIELDS
    assert set(SessionView.__struct_fields__) == shown
    assert set(RoundView.__struct_fields__) == {
        *RoundRecord.__struct_fields__,
        "idle_for",
        "best_after",
    }


def test_the_error_table_gives_every_class_a_code_an_exit_status_and_a_status() -> None:
    classes = errors.error_classes()
    assert errors.TraineeError in classes and errors.ShuttingDown in classes
    assert len({c.__name__ for c in classes}) == len(classes)
    for cls in classes:
        assert isinstance(cls.code, int) and 0 < cls.exit_status < 128
        assert 400 <= cls.http_status < 600
        assert errors.error_class_for_code(cls.code).code == cls.code
        rebuilt = errors.error_from_wire(cls("m", {"x": 1}).to_wire())
        assert type(rebuilt) is cls and rebuilt.exit_status == cls.exit_status
        assert errors.exit_status_for(rebuilt) == cls.exit_status
    assert errors.LimitExceeded("big", {"what": "request bytes"}).response_status() == 413
    assert errors.LimitExceeded("busy", {"what": "connections"}).response_status() == 503
    assert errors.SandboxError("x").exit_status == 6 and errors.LaunchError("x").exit_status == 7
    assert errors.MethodNotFound("x").http_status == 404


def test_the_openapi_document_is_valid_and_every_alias_is_a_method() -> None:
    doc = build_openapi(registry)
    validate_openapi(doc)
    for alias in ALIASES:
        assert alias.method in registry, alias
        assert alias.path in doc["paths"]
    ops = [op["operationId"] for item in doc["paths"].values() for op in item.values()]
    assert len(ops) == len(set(ops))
    assert {f"/api/tools/{m.name}" for m in registry} <= set(doc["paths"])
