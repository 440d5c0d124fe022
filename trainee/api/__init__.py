"""The method registry and its handlers: the business facade every transport serves."""
