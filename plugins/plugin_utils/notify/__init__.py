"""Telling people where they are: destinations (chat, on-call, webhooks), the messages an incident's final state makes,
their formats, and sending them without ever getting in the heal's way."""
