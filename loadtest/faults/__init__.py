"""Fault suite: kinference under load and faults, against real subprocesses (see __main__)."""
