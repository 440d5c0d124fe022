"""Red team, secrets: the caller's keys, tokens and passwords never reach a job, in any
mode, unless the project lists them in ``launch.env_passthrough``.

The caller's environment carries the provider keys trainee itself uses (OPENAI_API_KEY,
ANTHROPIC_API_KEY, MOONSHOT_API_KEY), HF_TOKEN, a cloud secret and a database password;
the job reports every variable whose value it can see.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.faults.helpers import assert_no_orphans, job_env, node
from tests.security.sandbox_helpers import SECRETS, findings, make_probe_project
from trainee.errors import ConfigError
from trainee.launch.render import is_secret_name, job_environ
from trainee.spec import load_project

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bwrap is not installed"),
]

PLAIN = {"TOKENIZERS_PARALLELISM": "false", "KEYBOARD_LAYOUT": "de", "MY_SETTING": "SECRET-not"}
"""Named like no secret: these reach the job (the value is not what makes a secret)."""


@pytest.mark.parametrize("mode", ["guarded", "unsafe"])
def test_no_secret_of_the_caller_reaches_the_job_unless_passed_through(
    mode: str, tmp_path: Path
) -> None:
    project = make_probe_project(
        tmp_path / "proj",
        {"*": {}},
        mode=mode,
        launch_extra="  env_passthrough: [HF_TOKEN]\n",
    )
    with node() as n:
        env = job_env(n.env, **SECRETS, **PLAIN)
        n.start_session(project, mode=mode, env=env)
        state = n.wait_finished(project, timeout=60)
    assert [r["status"] for r in state["rounds"]] == ["completed"]
    got = findings(project)
    assert got["secrets"] == {"HF_TOKEN": SECRETS["HF_TOKEN"], "MY_SETTING": "SECRET-not"}
    assert {"TOKENIZERS_PARALLELISM", "KEYBOARD_LAYOUT"} <= set(got["env"])
    for name in set(SECRETS) - {"HF_TOKEN"}:
        assert name not in got["env"], name
    assert_no_orphans(project)


def test_one_rule_names_the_secrets() -> None:
    for name in (
        *SECRETS,
        "WANDB_API_KEY",
        "GH_TOKEN",
        "SSH_AUTH_SOCK",
        "SENTRY_DSN",
        "GITLAB_PAT",
        "SMTP_PASS",
        "GOOGLE_APPLICATION_CREDENTIALS",
    ):
        assert is_secret_name(name), name
    for name in (*PLAIN, "PATH", "HOME", "PWD", "CUDA_VISIBLE_DEVICES", "KEYRING_BACKEND"):
        assert not is_secret_name(name), name
    env = {**SECRETS, **PLAIN, "TRAINEE_SOCKET": "/run/x.sock", "NOTIFY_SOCKET": "/run/n"}
    assert job_environ(env, ["HF_TOKEN"]) == {**PLAIN, "HF_TOKEN": SECRETS["HF_TOKEN"]}


def test_trainee_variables_cannot_be_passed_through(tmp_path: Path) -> None:
    project = make_probe_project(
        tmp_path / "proj", {}, launch_extra="  env_passthrough: [HF_TOKEN, TRAINEE_SOCKET]\n"
    )
    with pytest.raises(ConfigError, match=r"env_passthrough.*TRAINEE_SOCKET"):
        load_project(project)
