"""The course as one HTML site: every chapter, every notebook (executed), the images, one table of contents.

    python -m tinyinfer course book site/                # then open site/index.html in a browser
    python -m tinyinfer course book site/ --no-execute   # the notebooks as stored: code only, quick

Chapters go through Python-Markdown (tables, fenced code, `<details>` with Markdown inside, so hints and
worked answers stay folded); notebooks through nbconvert's HTML exporter, after nbclient runs them from the
repository root. Both are development extras (`pip install -e ".[book]"`): the runtime needs neither.

The site is flat: chapters at the top (`05-generation-kv-cache.html`), notebooks under `notebooks/`, images
under `images/`, so the chapters' relative links (`images/x.png`, `../notebooks/x.ipynb`, `06-sampling.md`)
are rewritten to their HTML pages and keep working.
"""

from __future__ import annotations

import html
import re
import shutil
from pathlib import Path

from tinyinfer.errors import TinyInferError

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title} — tinyinfer</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 0; display: flex; line-height: 1.5; }}
nav {{ width: 16rem; flex-shrink: 0; padding: 1rem; background: #f5f5f5; height: 100vh; overflow-y: auto; position: sticky; top: 0; font-size: 0.9rem; }}
nav a {{ display: block; color: #333; text-decoration: none; padding: 0.1rem 0; }}
nav a.here {{ font-weight: bold; }}
main {{ max-width: 52rem; padding: 1rem 2rem 4rem; }}
pre {{ background: #f6f8fa; padding: 0.8rem; overflow-x: auto; }}
code {{ font-size: 0.9em; }}
table {{ border-collapse: collapse; }} td, th {{ border: 1px solid #ccc; padding: 0.2rem 0.5rem; }}
img {{ max-width: 100%; }}
details {{ border: 1px solid #ddd; padding: 0.3rem 0.8rem; margin: 0.4rem 0; }}
</style></head>
<body><nav><a href="{up}index.html"><b>tinyinfer, the course</b></a>{nav}</nav><main>{body}</main></body></html>
"""


def _require():
    try:
        import markdown  # noqa: F401
        import nbconvert  # noqa: F401
    except ImportError as e:
        raise TinyInferError(f"building the book needs {e.name}: pip install -e \".[book]\"") from None


def title_of(markdown_text: str, fallback: str) -> str:
    match = re.search(r"^# (.+)$", markdown_text, re.M)
    return match[1].strip() if match else fallback


def rewrite_links(text: str) -> str:
    """Chapter-relative links -> the site's pages: NN-slug.md -> NN-slug.html, ../notebooks/x.ipynb ->
    notebooks/x.html."""
    text = re.sub(r"\]\((?:\.\./chapters/|\./)?(\d\d-[\w-]+)\.md(#[\w-]*)?\)", r"](\1.html\2)", text)
    text = re.sub(r"\]\((?:\.\./)?notebooks/([\w-]+)\.ipynb\)", r"](notebooks/\1.html)", text)
    return text


def chapter_html(text: str) -> str:
    import markdown

    text = rewrite_links(text).replace("<details>", '<details markdown="1">')
    return markdown.markdown(text, extensions=["fenced_code", "tables", "toc", "md_in_html", "sane_lists"])


def notebook_html(path: Path, root: Path, execute: bool, timeout: int = 300) -> str:
    """The notebook as the body of a page: executed from the repository root when `execute`."""
    import nbformat
    from nbconvert import HTMLExporter

    notebook = nbformat.read(path, as_version=4)
    if execute:
        import nbclient

        nbclient.NotebookClient(notebook, kernel_name="python3", timeout=timeout, resources={"metadata": {"path": str(root)}}).execute()
    exporter = HTMLExporter(template_name="basic")  # the cells only, in our page
    body, _ = exporter.from_notebook_node(notebook)
    return body


def build(root: Path, out: Path, execute: bool = True, echo=print) -> Path:
    """Write the site into `out` (created; an existing book there is replaced); returns the index page."""
    _require()
    root, out = Path(root), Path(out)
    if out.exists() and not (out / "index.html").is_file() and any(out.iterdir()):
        raise TinyInferError(f"{out} exists and holds something other than a book: give a new or empty directory")
    if out.exists():
        shutil.rmtree(out)
    (out / "notebooks").mkdir(parents=True)
    if (root / "chapters" / "images").is_dir():
        shutil.copytree(root / "chapters" / "images", out / "images", ignore=shutil.ignore_patterns("*.json"))
    chapters = sorted((root / "chapters").glob("[0-9][0-9]-*.md"))
    notebooks = sorted((root / "notebooks").glob("[0-9][0-9]-*.ipynb"))
    titles = {p.stem: title_of(p.read_text(encoding="utf-8"), p.stem) for p in chapters}

    def nav(here: str, up: str) -> str:
        links = []
        for stem, title in titles.items():
            cls = ' class="here"' if stem == here else ""
            links.append(f'<a{cls} href="{up}{stem}.html">{html.escape(title)}</a>')
            if any(n.stem == stem for n in notebooks):
                cls = ' class="here"' if f"notebooks/{stem}" == here else ""
                links.append(f'<a{cls} href="{up}notebooks/{stem}.html">&nbsp;&nbsp;notebook</a>')
        return "".join(links)

    for path in chapters:
        body = chapter_html(path.read_text(encoding="utf-8"))
        (out / f"{path.stem}.html").write_text(PAGE.format(title=html.escape(titles[path.stem]), up="", nav=nav(path.stem, ""), body=body), encoding="utf-8")
    for path in notebooks:
        echo(f"notebook {path.name}{' (executing)' if execute else ''}")
        body = notebook_html(path, root, execute)
        page = PAGE.format(title=f"notebook {path.stem}", up="../", nav=nav(f"notebooks/{path.stem}", "../"), body=body)
        (out / "notebooks" / f"{path.stem}.html").write_text(page, encoding="utf-8")
    rows = "".join(f'<li><a href="{stem}.html">{html.escape(title)}</a> · <a href="notebooks/{stem}.html">notebook</a></li>'
                   for stem, title in titles.items())
    intro = "<h1>tinyinfer, the course</h1><p>Each chapter explains one idea of an inference engine; its notebook runs it.</p>"
    (out / "index.html").write_text(PAGE.format(title="contents", up="", nav=nav("", ""), body=f"{intro}<ol start='0'>{rows}</ol>"), encoding="utf-8")
    return out / "index.html"
