"""Scheduling: delayed and timer messages delivered to their real topics, transactions and their check-back."""
