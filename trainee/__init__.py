"""trainee: the outer loop of training, run by a daemon for a project it does not own."""

__version__ = "0.1.0"
API_VERSION = 1
