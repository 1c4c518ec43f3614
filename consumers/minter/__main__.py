"""`python -m wakeful.consumers.minter`: how the executor starts its minter (consumers/executor/
credentials.py), with WAKEFUL_MINTER_SOCKET naming where it listens. It stops when the executor
does, or on SIGTERM."""

import signal
import threading

from wakeful.consumers.kafka.supervisor import stop_with_parent
from wakeful.consumers.minter.main import main
from wakeful.core.settings import Settings

stop_with_parent()
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stop.set())
signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C reaches the executor, which it stops with
main(Settings.from_env(), stop)
