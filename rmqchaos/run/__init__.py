"""One run's directory, all the state of one run (rundir.py), and what lives in it: where the run's
time went (stagetimes.py), the producer application's crash control (producer_control.py), the
consumers' serving status files (serving.py).

May import: every other part of `rmqchaos`."""
