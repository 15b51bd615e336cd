"""The model, at the bottom: errors, settings, messages, topics and groups, and the send rules.
Plain values and checks; nothing here reads or writes a table."""
