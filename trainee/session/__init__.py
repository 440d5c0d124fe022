"""Sessions: the loop as a state machine, its supervising task, and the event bus."""
