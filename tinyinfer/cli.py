"""`python -m tinyinfer ...`: the command line.

Each subcommand lives in its own module under `tinyinfer/commands/` and exposes two functions:
`add_arguments(parser)` and `run(args) -> int`. This file only wires them together and turns every
failure into one line on stderr and a non-zero exit, never a traceback:

    bad input (TinyInferError)            error: <the problem and the fix>                    exit 1
    a file that cannot be read or written error: cannot use '<path>': <reason>; check ...      exit 1
    sizes too large for memory            error: out of memory: check the sizes ...              exit 1
    a flag argparse refuses               error: tinyinfer generate: argument --seed: ...     exit 2
    Ctrl-C                                interrupted                                         exit 130
    a bug in tinyinfer                    error: internal error (...)                         exit 2

Set TINYINFER_DEBUG=1 to see the traceback of any error.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from tinyinfer.errors import TinyInferError

# name -> (module under tinyinfer.commands, one-line help)
COMMANDS = {
    "generate": ("generate", "generate text from a prompt, streaming it to stdout"),
    "chat": ("chat", "chat with a model through its chat template"),
    "tokenize": ("tokenize", "show how a text splits into tokens"),
    "memory": ("memory", "print the memory arithmetic of a model: weights, KV cache, decode-speed bound"),
    "models": ("models", "list built-in, pulled and locally cached models"),
    "pull": ("pull", "fetch a real model of tinyinfer's catalogue into its cache (sha256 checked)"),
    "perplexity": ("perplexity", "a model's perplexity on a text file, with llama.cpp's sliding window"),
    "bench": ("bench", "benchmarks that print ratios measured side by side in one run"),
    "course": ("course", "start and grade a course workspace"),
    "serve": ("serve", "an OpenAI-compatible HTTP server over the batching engine"),
}


class UsageError(Exception):
    """A command line that argparse cannot parse (unknown flag, missing or malformed value)."""


class Parser(argparse.ArgumentParser):
    """argparse, except that a bad command line raises UsageError instead of printing the whole usage text
    and exiting: `main` prints it as one line. Subcommand parsers are made of the same class."""

    def error(self, message: str):
        raise UsageError(f"{self.prog}: {message}; see `{self.prog} --help`")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="tinyinfer", description="A transformer inference runtime that is also a course.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in COMMANDS.items():
        try:
            module = importlib.import_module(f"tinyinfer.commands.{module_name}")
        except ModuleNotFoundError as e:
            if e.name != f"tinyinfer.commands.{module_name}":
                raise
            continue  # a command whose module is not written yet is simply absent
        command_parser = sub.add_parser(name, help=help_text, description=help_text)
        module.add_arguments(command_parser)
        command_parser.set_defaults(run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not getattr(args, "run", None):
        parser.print_help()
        return 2
    try:
        return int(args.run(args) or 0)
    except TinyInferError as e:
        if os.environ.get("TINYINFER_DEBUG"):
            raise
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader of stdout went away (`... | head`): nothing left to say
        return 0
    except OSError as e:  # a path the user gave is unreadable, a folder instead of a file, the disk is full...
        if os.environ.get("TINYINFER_DEBUG"):
            raise
        print(f"error: {file_error(e)}", file=sys.stderr)
        return 1
    except MemoryError:  # e.g. a config.json claiming a billion layers, or a --context / -n far too large
        if os.environ.get("TINYINFER_DEBUG"):
            raise
        print("error: out of memory: check the sizes in the model's config and the flags that size the work "
              "(--max-tokens, -n, --context, --batch)", file=sys.stderr)
        return 1
    except Exception as e:  # a bug in tinyinfer: still one line, with a way to see more
        if os.environ.get("TINYINFER_DEBUG"):
            raise
        print(f"error: internal error ({type(e).__name__}: {e}); rerun with TINYINFER_DEBUG=1 for the traceback", file=sys.stderr)
        return 2


def file_error(e: OSError) -> str:
    """One line for a file-system error: the path, the reason, and what to check.

    >>> file_error(PermissionError(13, "Permission denied", "/m/config.json"))
    "cannot use '/m/config.json': Permission denied; check that the path exists, is the right kind (file or folder) and is readable"
    """
    where = f"{e.filename!r}" if e.filename is not None else "a file"
    reason = e.strerror or type(e).__name__
    return f"cannot use {where}: {reason}; check that the path exists, is the right kind (file or folder) and is readable"
