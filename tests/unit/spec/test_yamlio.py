"""YamlDocument: dotted get/set on YAML and JSON files that keep the user's text."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from trainee.errors import ConfigError
from trainee.spec import YamlDocument, read_config_value

STYLES = {
    "readme-indent": "a:\n  b: 1\nlist:\n  - x\n  - y\n",
    "flush-sequences": "a:\n  b: 1\nlist:\n- x\n- y\n",
    "four-spaces": "a:\n    b: 1\nlist:\n    -   x\n    -   y\n",
    "flow": "a: {b: 1, c: [1, 2]}\nlist: [x, y]\n",
    "comments": "# head\na:  # eol\n  b: 1   # one\n\n# between\nlist:\n  - x\n# tail\n",
    "quotes": "a: 'single'\nb: \"double\"\nc: plain\nd: '1.0'\n",
    "interpolation": "a: ${oc.env:HOME}\nb: '${..a}/x'\nc: ${now:%Y-%m-%d}\n",
    "numbers": "a: 1e-5\nb: 0.00001\nc: 1_000\nd: 0x1F\ne: .inf\nf: 1.0\n",
    "block-scalars": "a: |\n  line one\n  line two\nb: >-\n  folded\n  text\n",
    "anchors-and-merge": "base: &b\n  lr: 0.1\nexp:\n  <<: *b\n  wd: 0.01\n",
    "no-final-newline": "a: 1\nb: 2",
    "crlf": "a: 1\r\nb:\r\n  c: 2\r\n",
    "bom": "\ufeffa: 1\n",
    "document-start": "# top\n%YAML 1.2\n---\na: 1\n",
    "leading-blank-lines": "\n\n# c\na: 1\n",
}


@pytest.mark.parametrize("text", list(STYLES.values()), ids=list(STYLES))
def test_an_unchanged_document_dumps_byte_identical(text: str) -> None:
    assert YamlDocument.from_text(text).dump() == text


@pytest.mark.parametrize("text", list(STYLES.values()), ids=list(STYLES))
def test_setting_a_new_key_changes_only_that(text: str) -> None:
    doc = YamlDocument.from_text(text)
    doc.set("zz_new", 5)
    out = doc.dump()
    assert YamlDocument.from_text(out).get("zz_new") == 5
    newline = "\r\n" if "\r\n" in text else "\n"
    assert out.replace(f"zz_new: 5{newline}", "").replace(f"{newline}zz_new: 5", "") == text


def test_get_has_set_and_delete_with_dotted_keys(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("optimizer:\n  lr: 0.1  # base lr\n  name: 'adam'\nlayers: [64, 32]\n")
    doc = YamlDocument.load(path)
    assert doc.get("optimizer.lr") == 0.1 and type(doc.get("optimizer.lr")) is float
    assert doc.get("optimizer") == {"lr": 0.1, "name": "adam"}
    assert doc.get("layers.1") == 32
    assert doc.has("optimizer.name") and not doc.has("optimizer.wd")
    assert doc.get("optimizer.wd", None) is None
    with pytest.raises(KeyError):
        doc.get("optimizer.wd")

    doc.set("optimizer.lr", 0.05)  # the comment keeps its column
    doc.set("optimizer.name", "sgd")
    doc.set("scheduler.warmup.steps", 100)  # intermediate maps are created
    doc.set("layers.0", 128)
    assert doc.delete("layers.1") and not doc.delete("nope.x")
    doc.save()

    assert path.read_text() == (
        "optimizer:\n  lr: 0.05 # base lr\n  name: 'sgd'\nlayers: [128]\n"
        "scheduler:\n  warmup:\n    steps: 100\n"
    )
    assert read_config_value(path, "scheduler.warmup.steps") == 100


def test_setting_an_equal_value_keeps_its_spelling() -> None:
    doc = YamlDocument.from_text("a: 0.00001\nb: 1.0\nc: yes_str\n")
    doc.set("a", 1e-05)
    doc.set("b", 1)
    doc.set("c", "yes_str")
    assert doc.dump() == "a: 0.00001\nb: 1.0\nc: yes_str\n"
    doc.set("b", True)  # a bool is not 1
    assert doc.dump() == "a: 0.00001\nb: true\nc: yes_str\n"


def test_setting_below_a_scalar_is_a_config_error() -> None:
    doc = YamlDocument.from_text("a: 1\n", path="cfg.yaml")
    with pytest.raises(ConfigError) as info:
        doc.set("a.b", 2)
    assert info.value.file == "cfg.yaml" and info.value.field == "a"
    assert "is a number, not a mapping" in str(info.value)


def test_json_documents_keep_key_order_and_two_space_indent(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"z": 1, "a": {"lr": 0.1, "b": [1, 2]}, "m": "x"}')
    doc = YamlDocument.load(path)
    assert doc.kind == "json"
    assert doc.get("a.lr") == 0.1
    doc.set("a.lr", 0.2)
    doc.set("new.key", True)
    doc.save()
    text = path.read_text()
    assert json.loads(text) == {
        "z": 1,
        "a": {"lr": 0.2, "b": [1, 2]},
        "m": "x",
        "new": {"key": True},
    }
    assert list(json.loads(text)) == ["z", "a", "m", "new"]
    assert text.startswith('{\n  "z": 1,\n  "a": {\n    "lr": 0.2,')
    assert not text.endswith("\n")  # the original had no final newline


def test_json_errors_name_the_line(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text('{\n  "a": 1,\n  "a": 2\n}\n')
    with pytest.raises(ConfigError, match="duplicate key"):
        YamlDocument.load(path)
    path.write_text('{\n  "a": 1,\n  oops\n}\n')
    with pytest.raises(ConfigError) as info:
        YamlDocument.load(path)
    assert info.value.line == 3 and "invalid JSON" in str(info.value)


def test_save_is_atomic_and_keeps_the_file_mode(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("a: 1\n")
    path.chmod(0o640)
    doc = YamlDocument.load(path)
    doc.set("a", 2)
    doc.save()
    assert path.read_text() == "a: 2\n"
    assert path.stat().st_mode & 0o777 == 0o640
    assert sorted(os.listdir(tmp_path)) == ["c.yaml"]  # no temp file left behind
    copy = tmp_path / "copy.yaml"
    doc.save(copy)
    assert copy.read_text() == "a: 2\n" and doc.path == copy


def test_new_documents_use_block_style_and_literal_multiline_text(tmp_path: Path) -> None:
    doc = YamlDocument.new(
        {"a": {"b": [1, 2]}, "text": "line one\nline two\n", "e": []}, path=tmp_path / "n.yaml"
    )
    assert doc.dump() == "a:\n  b:\n    - 1\n    - 2\ntext: |\n  line one\n  line two\ne: []\n"
    doc.save()
    assert YamlDocument.load(tmp_path / "n.yaml").get("text") == "line one\nline two\n"


def test_read_config_value_missing_key_names_file_and_key(tmp_path: Path) -> None:
    path = tmp_path / "base.yaml"
    path.write_text("a:\n  b: 1\n")
    assert read_config_value(path, "a.b") == 1
    with pytest.raises(ConfigError) as info:
        read_config_value(path, "a.c")
    assert (info.value.file, info.value.field) == (str(path), "a.c")


def test_aliases_are_allowed_in_configs_but_capped_when_expanded() -> None:
    text = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 12)
    )
    doc = YamlDocument.from_text(text)
    assert doc.get("a1.0") == ["x"] * 10
    with pytest.raises(ConfigError, match="alias expansion"):
        doc.get("a11")
    with pytest.raises(ConfigError, match="aliases"):
        YamlDocument.from_text(text, allow_aliases=False)


def test_deeply_nested_input_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="invalid YAML"):
        YamlDocument.from_text("a: " + "[" * 5000)


# PyYAML (YAML 1.1) reads a float only if it has a dot: 1e-05 would come back a string.
YAML11_FLOAT = r"^[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?$"


@pytest.mark.parametrize("value", [1e-05, 1e20, 1.5e-07, 0.1, 1.0, -2.5e-300, 123456789012345678.0])
def test_new_floats_are_written_so_yaml_1_1_readers_see_floats(value: float) -> None:
    doc = YamlDocument.from_text("lr: 0.1  # tuned\n")
    doc.set("lr", value)
    text = doc.dump()
    written = text.split(":", 1)[1].split("#")[0].strip()
    assert re.match(YAML11_FLOAT, written), written
    assert YamlDocument.from_text(text).get("lr") == value


def test_an_anchor_defined_twice_is_a_config_error_naming_the_line() -> None:
    """ruamel only warns of it: the loader makes it an error (found by the property test)."""
    with pytest.raises(ConfigError, match=r"p\.yaml:2: invalid YAML: found duplicate anchor 'a'"):
        YamlDocument.from_text("version: 1\n&a run: &a 1\n", path="p.yaml")
