"""Runs a command in its own process group, waits until a staging
directory appears in DIR, then sends SIGNAL to the group (as a terminal's
Ctrl-C or a job scheduler's kill would) and checks that it died of it.

usage: interrupt.py DIR SIGNAL -- COMMAND...
"""
import os
import signal
import subprocess
import sys
import time

directory, name, separator, *command = sys.argv[1:]
assert separator == "--"
number = getattr(signal, name)
process = subprocess.Popen(command, start_new_session=True)
deadline = time.time() + 60
while not any(".tmp" in entry for entry in os.listdir(directory)):
    if process.poll() is not None or time.time() > deadline:
        sys.exit(f"no staging directory appeared in {directory}")
    time.sleep(0.05)
time.sleep(0.5)
os.killpg(process.pid, number)
status = process.wait(timeout=30)
if status != -number:
    sys.exit(f"expected death by {name}, got exit status {status}")
