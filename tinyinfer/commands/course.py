"""`tinyinfer course ...`: start a student workspace, grade it, list the exercises, verify the grading.

    python -m tinyinfer course list
    python -m tinyinfer course start ~/my-course --chapter 3      # or --only 3.1 3.2; all when neither
    python -m tinyinfer course check 3.1 --workspace ~/my-course  # ids or chapters; the stubbed ones by default
    python -m tinyinfer course hint 3.1 --level 2                 # a hint; the last nearly gives it away
    python -m tinyinfer course answer 5.q1 131072                 # check a chapter question's answer
    python -m tinyinfer course figures                            # the notebooks' plots and the diagrams, as images
    python -m tinyinfer course book site/                         # the chapters and executed notebooks as HTML
    python -m tinyinfer course verify                             # reference passes, every stub is caught
    python -m tinyinfer course prerequisites                      # measure what each exercise needs, store it
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from tinyinfer.commands import at_least
from tinyinfer.course.exercises import chapter_file, find_exercises, select_exercises, split_selection
from tinyinfer.course.grading import grade_alone
from tinyinfer.course.exercises import PREREQUISITES
from tinyinfer.course.study import TOLERANCE, all_questions, hint, is_right, parse_value, question
from tinyinfer.course.verify import prerequisites, reference_checks, table, verify_exercises, write_prerequisites
from tinyinfer.course.workspace import project_root, read_state, start_workspace
from tinyinfer.errors import TinyInferError


def add_arguments(parser) -> None:
    sub = parser.add_subparsers(dest="course_command", metavar="ACTION", required=True)
    sub.add_parser("list", help="list the exercises marked in the source").set_defaults(run=run_list)

    start = sub.add_parser("start", help="create a workspace with exercise regions replaced by stubs")
    start.add_argument("dir", type=Path, help="new directory for the workspace")
    start.add_argument("--only", nargs="+", default=[], metavar="ID", help="stub only these exercises, e.g. 3.1 3.2")
    start.add_argument("--chapter", nargs="+", type=int, default=[], metavar="N", help="stub the exercises of these chapters")
    start.set_defaults(run=run_start)

    check = sub.add_parser("check", help="grade a workspace: run the exercise tests against its code")
    check.add_argument("ids", nargs="*", metavar="ID", help="exercise ids (3.1) or chapters (3); default: those stubbed at start")
    check.add_argument("--workspace", type=Path, default=Path("."), help="the workspace to grade (default: the current directory)")
    check.add_argument("--quiet", action="store_true", help="print only the table, not pytest's output")
    check.set_defaults(run=run_check)

    verify = sub.add_parser("verify", help="prove the grading: the reference passes, each stubbed exercise fails")
    verify.add_argument("--jobs", type=at_least(1), default=2, help="stubbed workspaces graded at once (default 2)")
    verify.set_defaults(run=run_verify)

    hint = sub.add_parser("hint", help="print a hint for an exercise (the chapter holds them, folded)")
    hint.add_argument("id", metavar="ID", help="exercise id, e.g. 3.1")
    hint.add_argument("--level", type=at_least(1), default=1, help="which hint: 1 is gentle, the last nearly gives it away")
    hint.set_defaults(run=run_hint)

    answer = sub.add_parser("answer", help="print a chapter's question, or check your answer to it")
    answer.add_argument("id", metavar="QUESTION", help="question id, e.g. 5.q1 (`course answer` alone lists them)", nargs="?")
    answer.add_argument("value", nargs="?", help="your answer, a number; leave it out to see the question")
    answer.set_defaults(run=run_answer)

    figures = sub.add_parser("figures", help="run the notebooks and draw the diagrams into chapters/images/")
    figures.add_argument("notebooks", nargs="*", type=Path, help="only these notebooks (default: all, and the diagrams)")
    figures.set_defaults(run=run_figures)

    book = sub.add_parser("book", help="build one HTML site of the chapters and the executed notebooks")
    book.add_argument("out", type=Path, help="directory for the site (open OUT/index.html)")
    book.add_argument("--no-execute", action="store_true", help="show the notebooks as stored, without running them")
    book.set_defaults(run=run_book)

    prerequisites = sub.add_parser("prerequisites", help="measure which exercises each exercise's tests run, and store it")
    prerequisites.set_defaults(run=run_prerequisites)


def run(args) -> int:  # replaced by the chosen action's run through set_defaults
    raise AssertionError("unreachable: argparse sets the action's own run")


def run_list(args) -> int:
    root = project_root()
    for e in find_exercises(root):
        print(f"{e.id:<6} {e.title:<40} {e.where():<36} {chapter_file(root, e.chapter)}")
    return 0


def run_start(args) -> int:
    if args.dir.exists() and not args.dir.is_dir():
        raise TinyInferError(f"{args.dir} is a file: give a new directory for the workspace")
    root = project_root()
    chosen = select_exercises(find_exercises(root), args.only, args.chapter)
    workspace = start_workspace(root, args.dir, chosen)
    print(f"created {workspace} with {len(chosen)} exercise(s) to write: {' '.join(e.id for e in chosen) or 'none'}")
    print(f"read {workspace / 'README.md'}, then grade with: python -m tinyinfer course check --workspace {workspace}")
    return 0


def run_check(args) -> int:
    exercises = find_exercises(args.workspace)
    ids, chapters = split_selection(args.ids)
    if not args.ids:  # what was stubbed at start, or everything when nothing was
        ids = read_state(args.workspace)["stubbed"] or [e.id for e in exercises]
    chosen = select_exercises(exercises, ids, chapters)
    grade = grade_alone(args.workspace, chosen, project_root(), echo=not args.quiet)
    print(grade.table())
    return 0 if grade.all_passed else 1


def run_verify(args) -> int:
    with tempfile.TemporaryDirectory(prefix="tinyinfer-verify-") as workdir:
        checks = verify_exercises(project_root(), Path(workdir), jobs=args.jobs, progress=True)
    if not checks:
        print("no exercise is marked in the source yet")
        return 0
    print(table(checks))
    problems = [c.problem for c in checks if c.problem]
    for problem in problems:
        print(f"problem: {problem}")
    return 1 if problems else 0


def run_hint(args) -> int:
    text, count = hint(project_root(), args.id, args.level)
    print(f"Hint {args.level} of {count} for exercise {args.id}:\n\n{text}")
    if args.level < count:
        print(f"\nStill stuck? python -m tinyinfer course hint {args.id} --level {args.level + 1}")
    return 0


def run_answer(args) -> int:
    root = project_root()
    if args.id is None:
        for q in all_questions(root).values():
            print(f"{q.id:<7} {' '.join(q.text.split())[:100]}")
        return 0
    q = question(root, args.id)
    if args.value is None:
        print(f"Question {q.id}. {q.text}\n\nAnswer with: python -m tinyinfer course answer {q.id} NUMBER")
        return 0
    if not is_right(q, parse_value(args.value)):
        print(f"{args.value} is not the answer to {q.id} (within {TOLERANCE:.0%}): reread the question, or see its worked answer in the chapter")
        return 1
    print(f"Right: {q.id} is {q.answer:g}.\n\n{q.worked}")
    return 0


def run_figures(args) -> int:
    from tinyinfer.course.figures import render  # needs matplotlib and nbclient, development dependencies

    root = project_root()
    notebooks = args.notebooks or sorted((root / "notebooks").glob("*.ipynb"))
    missing = [str(p) for p in notebooks if not Path(p).is_file()]
    if missing:
        raise TinyInferError(f"no notebook {', '.join(missing)}: give paths like notebooks/05-generation-kv-cache.ipynb")
    count = render(root, [Path(p).resolve() for p in notebooks], diagrams=not args.notebooks)
    print(f"wrote {count} image(s) to {root / 'chapters' / 'images'}")
    return 0


def run_book(args) -> int:
    from tinyinfer.course.book import build

    index = build(project_root(), args.out, execute=not args.no_execute)
    print(f"wrote the book: open {index.resolve()}")
    return 0


def run_prerequisites(args) -> int:
    with tempfile.TemporaryDirectory(prefix="tinyinfer-prerequisites-") as workdir:
        checks = reference_checks(project_root(), Path(workdir))
    failing = [c.reference.exercise.id for c in checks if not c.reference.passed]
    if failing:
        raise TinyInferError(f"the reference of exercise(s) {', '.join(failing)} fails its tests: fix that before measuring prerequisites")
    write_prerequisites(prerequisites(checks))
    print(f"wrote the prerequisites of {len(checks)} exercises to {PREREQUISITES}")
    return 0
