"""``python -m trainee.daemon``: the daemon process (what ``trainee serve`` execs)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from trainee import paths


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="trainee serve", description="Run the trainee daemon.")
    p.add_argument("project_root", nargs="?", default=None)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument(
        "--port",
        type=int,
        default=None,
        help=f"HTTP port (default ${paths.HTTP_PORT_ENV}, else {paths.DEFAULT_HTTP_PORT}: "
        "then a free port when it is taken)",
    )
    p.add_argument(
        "--port-fallback", action="store_true", help="use a free port if --port is taken"
    )
    p.add_argument("--ready-fd", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--reload", action="store_true", help="restart when trainee's code changes")
    p.add_argument("--log-level", default=os.environ.get("TRAINEE_LOG_LEVEL", "INFO"))
    return p.parse_args(argv)


def _config(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from trainee.daemon.main import DaemonConfig

    root = Path(args.project_root).resolve() if args.project_root else None
    if root is not None and not root.is_dir():
        sys.stderr.write(f"error: project root {root} is not a folder\n")
        raise SystemExit(2)
    if args.port is not None:
        port, asked = args.port, True
    else:
        from trainee.errors import TraineeError

        try:
            port, asked = paths.http_port()
        except TraineeError as exc:
            sys.stderr.write(f"error: {exc.message}\n")
            raise SystemExit(2) from None
    return DaemonConfig(
        socket_path=paths.socket_path(),
        project_root=root,
        host=args.host,
        port=port,
        port_fallback=args.port_fallback or not asked,
        ready_fd=args.ready_fd,
        log_level=args.log_level.upper(),
    )


def _run(argv: list[str]) -> int:
    from trainee.daemon.main import run

    return run(_config(parse_args(argv)))


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.reload:
        import watchfiles

        import trainee

        child = [a for a in argv if a != "--reload"]
        watchfiles.run_process(Path(trainee.__file__).parent, target=_run, args=(child,))
        return 0
    return run_config(args)


def run_config(args: argparse.Namespace) -> int:
    from trainee.daemon.main import run

    return run(_config(args))


if __name__ == "__main__":
    raise SystemExit(main())
