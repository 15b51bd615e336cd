"""Sending: the producer (checks, queue choice, UNIQ_KEYs) for lists of messages on the driver, and the
Arrow half of a DataFrame send that runs the same checks on the executors."""
