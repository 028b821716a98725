"""A signal that lands where Python ignores exceptions still stops the command, quietly."""

from __future__ import annotations

import os
import signal
import time
import weakref

import pytest

from beam_tfrecord.commands.console import stop_on_signals


def test_an_interrupt_that_lands_in_a_callback_python_ignores_is_raised_again(capsys):
    # A SIGTERM 0.3 s into a build landed in an import lock's weakref callback: Python printed
    # "Exception ignored in ..." with a traceback, and the KeyboardInterrupt was lost there.
    class Thing:
        pass

    def callback(_ref) -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.01)  # the handler runs here, inside the callback

    with pytest.raises(KeyboardInterrupt), stop_on_signals((signal.SIGTERM,)) as stopped:
        thing = Thing()
        ref = weakref.ref(thing, callback)
        del thing
        for _ in range(200):
            time.sleep(0.005)
        pytest.fail(f"the interrupt was lost ({ref})")
    assert stopped.signum == signal.SIGTERM
    assert capsys.readouterr().err == ""
