# Overrides the globals of the script that execs this file:
#   python train.py config/some_config.py --batch_size=32
# A word without "=" is a config file run in the script's globals; --key=value sets an
# existing global, the value read as a Python literal when it is one.
import sys
from ast import literal_eval

for arg in sys.argv[1:]:
    if "=" not in arg:
        assert not arg.startswith("--"), f"expected --key=value, got {arg}"
        print(f"Overriding config with {arg}:")
        exec(open(arg).read())
    else:
        assert arg.startswith("--"), f"expected --key=value, got {arg}"
        key, val = arg[2:].split("=", 1)
        assert key in globals(), f"Unknown config key: {key}"
        try:
            attempt = literal_eval(val)
        except (SyntaxError, ValueError):
            attempt = val
        assert type(attempt) == type(globals()[key]), f"{key}: {type(attempt)} is not {type(globals()[key])}"  # noqa: E721
        globals()[key] = attempt
