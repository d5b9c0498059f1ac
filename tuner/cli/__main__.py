"""``python -m tuner.cli``: the same as the ``slotune`` console script."""

from tuner.cli.main import main

if __name__ == "__main__":
    main()
