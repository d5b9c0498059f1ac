"""``python -m slotune.tuner.cli``: the same as the ``slotune`` console script."""

from slotune.tuner.cli.main import main

if __name__ == "__main__":
    main()
