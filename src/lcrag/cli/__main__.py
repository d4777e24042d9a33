"""``python -m lcrag.cli``: the ``lcrag`` command."""

from lcrag.cli import main

if __name__ == "__main__":
    main()
