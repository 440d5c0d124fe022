"""``trainee version``."""

from __future__ import annotations

import argparse
import sys

import trainee
from trainee.cli.output import print_json


def cmd_version(args: argparse.Namespace) -> int:
    if args.json:
        print_json({"version": trainee.__version__, "api_version": trainee.API_VERSION})
    else:
        sys.stdout.write(f"trainee {trainee.__version__}\n")
    return 0
