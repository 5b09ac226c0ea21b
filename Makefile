# Two commands:  make book  |  make test      (see README.md)
# and, at paper scale / for print:  make reproduce  |  make pdf  |  make bench
#
# Both bootstrap .venv from requirements.txt (exact pins) when it is missing or older
# than that file, register the venv's python as the Jupyter kernel "python3" and install
# idlib into it in editable mode (pyproject.toml; `import idlib` works in every kernel, whatever
# its working directory, and the `idlib` command is on the venv's PATH).

SHELL       := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
.DELETE_ON_ERROR:

VENV     := .venv
PY       := $(CURDIR)/$(VENV)/bin/python
BIN      := $(CURDIR)/$(VENV)/bin
STAMP    := $(VENV)/.stamp
SETUP    := $(VENV)/.setup
PTH_NAME := idlib_repo.pth

CHAPTERS := $(sort $(wildcard chapters/*.ipynb))
BUILD    := _build
PM_OUT   := $(BUILD)/papermill
GEN      := $(BUILD)/generated
TIMINGS  := $(BUILD)/timings
REPRO    := $(BUILD)/reproduce
# profile passed to every chapter by `make papermill` (the notebooks default to "default")
PROFILE  ?= default

# Deterministic, self-contained environment for everything below.
# Thread count (OMP_NUM_THREADS) is deliberately left alone: printed results must not
# depend on it (chapters print rounded values, not the last bits of a float sum).
export PATH                   := $(BIN):$(PATH)
export PYTHONHASHSEED         := 0
export PYTHONDONTWRITEBYTECODE := 1
# Prefer the venv's kernelspec over any user-level one (~/.local/share/jupyter).
export JUPYTER_PREFER_ENV_PATH := 1
export PYDEVD_DISABLE_FILE_VALIDATION := 1
# Non-interactive backend for scripts and unit tests ...
MPL_SCRIPTS := MPLBACKEND=Agg
# ... but notebook kernels must keep the inline backend (ipykernel only installs it when
# MPLBACKEND is unset; with Agg the book would have no figures).
MPL_KERNEL  = MPLBACKEND=module://matplotlib_inline.backend_inline $(if $(KERNEL_THREADS),OMP_NUM_THREADS=$(KERNEL_THREADS) MKL_NUM_THREADS=$(KERNEL_THREADS))
# (KERNEL_THREADS: set by make test, which runs two executions of the chapters side by side)

JB_FLAGS := -W -n --keep-going --all

.PHONY: help venv book html test unit package browser chromium nbval papermill outputs clean distclean \
        report reproduce pdf latex tex bench determinism mutation

help:
	@echo "make book      execute every chapter (papermill) and build _build/html/index.html from them (warnings = errors)"
	@echo "make test      unit tests (2 cores), nbval (strict), make book, then the browser test of the HTML"
	@echo "make browser   only the browser test of the built HTML (chromium; screenshots in $(BUILD)/screenshots/)"
	@echo "make outputs   re-execute every chapter in place (store outputs that nbval checks)"
	@echo "make reproduce every chapter with profile=full into $(REPRO)/, then a second book from them"
	@echo "make pdf       the whole book as one PDF in $(BUILD)/pdf/ (installs TeX Live via apt-get if missing)"
	@echo "make bench     rank-engine benchmark -> benchmarks/results/ (JSON + figures the book shows)"
	@echo "make mutation  mutation testing of the core (mutmut) -> benchmarks/results/mutation.md, every survivor explained"
	@echo "make determinism  execute every chapter twice, compare the text outputs"
	@echo "make clean     remove _build and caches (keeps .venv);  make distclean also removes .venv"

# --- bootstrap ---------------------------------------------------------------------------

$(STAMP): requirements.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --disable-pip-version-check -q -r requirements.txt
	touch $@

# Cheap, idempotent steps that follow each (re)install.
$(SETUP): $(STAMP)
	$(PY) -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (idlib .venv)" >/dev/null
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .
	rm -f "$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/$(PTH_NAME)"
	@# build matplotlib's font cache now, so its one-off stderr notice never lands in a notebook
	$(MPL_SCRIPTS) $(PY) -c 'import matplotlib.pyplot'
	touch $@

venv: $(SETUP)

# --- the book ----------------------------------------------------------------------------

# The book is built from executed notebooks, never by Sphinx executing them: `make papermill`
# runs every chapter once (fresh kernel, no cache, so an edit to idlib/ always shows), then
# $(call book_from,...) builds a copy of the sources with those notebooks in chapters/ and
# execute_notebooks: off. `make book`, `make test` and `make reproduce` all go this way,
# so the HTML a test looked at is the HTML a reader gets.
book: $(SETUP)
	$(MAKE) --no-print-directory papermill
	$(MAKE) --no-print-directory html

# The HTML from the notebooks already in $(PM_OUT) (chapters not there: their stored outputs).
html: $(SETUP)
	$(call book_from,$(PM_OUT),$(BUILD)/src,main,$(CURDIR))
	@echo "make book: OK -> $(BUILD)/html/index.html"

# $(call book_from,EXECUTED_DIR,SOURCE_COPY,REPORT_BOOK,OUTPUT_ROOT[,BUILDER]): copy the book's
# sources to SOURCE_COPY, put EXECUTED_DIR/*.ipynb in its chapters/, switch execution off, write
# the reproducibility page's includes, build OUTPUT_ROOT/_build/html (or, with
# BUILDER = --builder pdflatex, OUTPUT_ROOT/_build/latex/book.pdf) with warnings as errors.
define book_from
	rm -rf $(2) $(4)/$(BUILD)/$(if $(5),latex,html) $(4)/$(BUILD)/.doctrees $(4)/$(BUILD)/jupyter_execute
	mkdir -p $(2)
	tar -c --exclude=./$(BUILD) --exclude=./$(VENV) --exclude=./.git --exclude=./.pytest_cache --exclude=./mutants \
	  --exclude='*/.ipynb_checkpoints' --exclude='*/__pycache__' -f - . | tar -x -C $(2)
	if ls $(1)/*.ipynb >/dev/null 2>&1; then cp $(1)/*.ipynb $(2)/chapters/; fi
	$(PY) -c "$$EXECUTED_BOOK" $(2) $(3)
	$(MPL_SCRIPTS) $(PY) benchmarks/report.py --book $(3) --out $(2)/$(GEN) $(CHAPTERS)
	@status=0; $(BIN)/jupyter-book build $(2) --path-output $(4) $(5) $(JB_FLAGS) || status=$$?; \
	if [ "$$status" != 0 ]; then echo; echo "book build FAILED (see the warnings above)"; exit 1; fi; \
	test -f $(4)/$(BUILD)/$(if $(5),latex/book.pdf,html/index.html)
endef

# execute_notebooks: off in the copy; in the main book the cell papermill injects
# (profile = "default", the stored value) is removed from the page, make reproduce shows it.
define EXECUTED_BOOK
import re, sys, pathlib, nbformat
root, book = pathlib.Path(sys.argv[1]), sys.argv[2]
cfg = root / "_config.yml"
text, n = re.subn(r"(?m)^(\s*execute_notebooks:).*$$", r"\1 off   # built from executed notebooks", cfg.read_text())
assert n == 1, "execute_notebooks not found in _config.yml"
cfg.write_text(text)
for p in sorted((root / "chapters").glob("*.ipynb")):
    nb = nbformat.read(p, as_version=4)
    for c in nb.cells:
        tags = c.metadata.setdefault("tags", [])
        if book == "main" and "injected-parameters" in tags and "remove-cell" not in tags:
            tags.append("remove-cell")
    nbformat.write(nb, p)
endef
export EXECUTED_BOOK

# --- tests -------------------------------------------------------------------------------

# The installable package: the wheel builds (pyproject.toml), and the `idlib` command installed
# from it (into $(BUILD)/wheel/site, not the editable install) runs from another directory and
# finds the shipped configs (census).
WHEEL_SITE := $(CURDIR)/$(BUILD)/wheel/site
package: $(SETUP)
	rm -rf $(BUILD)/wheel
	$(PY) -m pip wheel -q --no-deps --no-build-isolation -w $(BUILD)/wheel .
	rm -rf build idlib.egg-info
	$(PY) -m pip install -q --no-deps --target $(WHEEL_SITE) $(BUILD)/wheel/idlib-*.whl
	cd /tmp && PYTHONPATH=$(WHEEL_SITE) $(PY) -c 'import idlib, sys; sys.exit(not idlib.__file__.startswith("$(WHEEL_SITE)/"))'
	cd /tmp && PYTHONPATH=$(WHEEL_SITE) $(WHEEL_SITE)/bin/idlib count --d-model 16 --heads 4 | grep "unidentified share 0.125000 (= 1/8)" >/dev/null
	cd /tmp && PYTHONPATH=$(WHEEL_SITE) $(WHEEL_SITE)/bin/idlib census | grep "BERT-base" >/dev/null
	@echo "make package: OK ($$(cd $(BUILD)/wheel && ls idlib-*.whl))"

# Every chapter is executed twice: by nbval (against the stored outputs) and by papermill (the
# notebooks the book is built from). The two run side by side, one per core, each kernel with
# one torch thread (printed results do not depend on the thread count: nbval checks it here,
# against outputs stored with the default). Then the HTML from papermill's notebooks, then the
# browser test of that HTML.
test: $(SETUP)
	$(MAKE) --no-print-directory unit
	$(MAKE) --no-print-directory package
	$(MAKE) --no-print-directory -j2 --output-sync=target nbval papermill KERNEL_THREADS=1
	$(MAKE) --no-print-directory html
	$(MAKE) --no-print-directory browser
	@echo "make test: OK"

# Unit tests on both cores (pytest-xdist); the browser test has its own step.
unit: $(SETUP)
	$(MPL_SCRIPTS) $(BIN)/pytest -q -p no:cacheprovider -n 2 --ignore=tests/browser tests/

# The rendered book in a real browser (Debian's chromium through Playwright, network off):
# every page of $(BUILD)/html at 1280 and 800 px; screenshots in $(BUILD)/screenshots/.
browser: $(SETUP) chromium
	@test -f $(BUILD)/html/index.html || { echo "make browser: no $(BUILD)/html, run make book first"; exit 1; }
	$(MPL_SCRIPTS) $(BIN)/pytest -q -p no:cacheprovider tests/browser

chromium:
	@if command -v chromium >/dev/null; then echo "make chromium: $$(command -v chromium) present"; \
	elif command -v apt-get >/dev/null; then \
	  echo "make chromium: installing Debian's chromium"; \
	  $(SUDO) apt-get update -q; \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q chromium; \
	else echo "make chromium: no apt-get; install chromium (the browser test drives it)"; exit 1; fi

# Strict nbval: every stored output must equal the re-executed one (modulo the
# commented rules in nbval_sanitize.cfg). Kernel = the venv's python.
nbval: $(SETUP)
	@if [ -z "$(CHAPTERS)" ]; then echo "make nbval: no chapters/*.ipynb"; exit 0; fi
	@# kernelspec, parameters cell, and stored outputs (nbval silently skips unrun cells)
	@$(PY) -c "$$CHECK_CHAPTERS" $(CHAPTERS)
	$(MPL_KERNEL) $(BIN)/pytest -q -p no:cacheprovider --nbval --nbval-current-env \
	  --nbval-sanitize-with nbval_sanitize.cfg $(CHAPTERS)

# Every chapter through papermill with its `parameters` cell (profile=$(PROFILE)),
# kernel working directory = chapters/ (as in nbval). Prints each chapter
# and its elapsed time; every chapter is attempted, the target fails if any failed. Times and
# environment go to $(TIMINGS)/$(PROFILE).json (shown on the reproducibility page).
papermill: $(SETUP)
	@if [ -z "$(CHAPTERS)" ]; then echo "make papermill: no chapters/*.ipynb"; exit 0; fi
	rm -rf $(PM_OUT)
	$(MPL_KERNEL) $(PY) benchmarks/run_chapters.py --profile "$(PROFILE)" --out $(PM_OUT) \
	  --timings $(TIMINGS)/$(PROFILE).json $(CHAPTERS)

# Re-execute every chapter in place (outputs stored in the .ipynb, what nbval compares),
# in the same environment as the checks above. Run after editing a chapter or idlib/.
outputs: $(SETUP)
	$(MPL_KERNEL) $(PY) -c "$$STORE_OUTPUTS" $(CHAPTERS)

define CHECK_CHAPTERS
import sys, nbformat
bad = []
for p in sys.argv[1:]:
    nb = nbformat.read(p, as_version=4)
    ks = nb.metadata.get("kernelspec", {}).get("name")
    if ks != "python3":
        bad.append(f"{p}: metadata.kernelspec.name is {ks!r}, must be 'python3' (the .venv kernel)")
    if not any(c.cell_type == "code" and "parameters" in c.metadata.get("tags", []) for c in nb.cells):
        bad.append(f"{p}: no code cell tagged 'parameters' (papermill)")
    for i, c in enumerate(nb.cells):
        skip = "nbval-skip" in c.metadata.get("tags", []) or "NBVAL_SKIP" in c.source
        if c.cell_type == "code" and c.source.strip() and c.execution_count is None and not skip:
            bad.append(f"{p}: code cell {i} has no stored execution (nbval would not check it)"
                       " -> run `make outputs`")
if bad:
    print("\n".join(bad), file=sys.stderr)
    sys.exit(1)
endef
export CHECK_CHAPTERS

define STORE_OUTPUTS
import sys, pathlib, nbformat, nbclient
for p in sys.argv[1:]:
    nb = nbformat.read(p, as_version=4)
    nbclient.NotebookClient(nb, timeout=600, kernel_name="python3", record_timing=False,
        resources={"metadata": {"path": str(pathlib.Path(p).parent)}}).execute()
    nbformat.write(nb, p)
    print("stored outputs:", p)
endef
export STORE_OUTPUTS

# --- the reproducibility page's generated includes ------------------------------------------

# _build/generated/{build,benchmark}.md: environment, per-profile chapter times (from
# $(TIMINGS)/*.json when they exist), the committed benchmark (benchmarks/results/). Written
# before every build, so chapters/reproducibility.md can include them from a fresh clone.
report: $(SETUP)
	$(MPL_SCRIPTS) $(PY) benchmarks/report.py --book main --out $(GEN) $(CHAPTERS)

# --- reproduction at paper scale -------------------------------------------------------------

# 1. every chapter with -p profile full through papermill into $(REPRO)/chapters/ (progress and
#    elapsed time printed; times in $(TIMINGS)/full.json);
# 2. a copy of the book's sources around them, with execute_notebooks: off, built into
#    $(REPRO)/_build/html (same Sphinx flags as make book: warnings are errors).
reproduce: $(SETUP)
	rm -rf $(REPRO)
	@status=0; $(MPL_KERNEL) $(PY) benchmarks/run_chapters.py --profile full --out $(REPRO)/chapters \
	  --timings $(TIMINGS)/full.json $(CHAPTERS) || status=$$?; \
	if [ "$$status" != 0 ]; then echo "make reproduce: FAILED (see the chapters above)"; exit 1; fi
	$(PY) benchmarks/full_profile.py     # the committed record (benchmarks/results/full_profile.*)
	$(call book_from,$(REPRO)/chapters,$(REPRO)/src,reproduce,$(REPRO))
	@echo "make reproduce: OK -> $(REPRO)/$(BUILD)/html/index.html"

# --- PDF ---------------------------------------------------------------------------------------

# Jupyter Book's LaTeX builder (xelatex via latexmk; Sphinx also wants xindy and the FreeFont
# OpenType fonts, Jupyter Book's class bbm.sty from texlive-fonts-extra). `make tex` installs
# them from Debian/Ubuntu packages when any is missing.
TEX_PACKAGES := texlive-latex-recommended texlive-latex-extra texlive-fonts-recommended \
                texlive-fonts-extra texlive-xetex texlive-plain-generic latexmk xindy fonts-freefont-otf \
                poppler-utils
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

tex:
	@if command -v xelatex >/dev/null && command -v latexmk >/dev/null && command -v xindy >/dev/null \
	    && kpsewhich bbm.sty >/dev/null && command -v fc-list >/dev/null && fc-list | grep -qi FreeSerif \
	    && command -v pdftotext >/dev/null; then \
	  echo "make tex: xelatex, latexmk, xindy, bbm.sty and FreeFont present"; \
	elif command -v apt-get >/dev/null; then \
	  echo "make tex: installing $(TEX_PACKAGES)"; \
	  $(SUDO) apt-get update -q; \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q --no-install-recommends $(TEX_PACKAGES); \
	else \
	  echo "make tex: no apt-get; install TeX Live (xelatex, latexmk, xindy, bbm-macros) and FreeFont (OTF)"; exit 1; \
	fi

# Built like the HTML: from papermill's executed notebooks (make papermill first, as make book).
# Fails on more than OVERFULL_MAX places with overfull boxes (> 1 pt) in the LaTeX log, or on any
# box more than OVERFULL_PT too wide (text or tables into the margin or off the page) and on raw markup in the PDF's text (tests/browser/check_pdf.py: pipe tables, ??,
# unresolved roles, TeX delimiters).
OVERFULL_MAX ?= 10
OVERFULL_PT  ?= 15

pdf: $(SETUP) tex
	$(MAKE) --no-print-directory papermill
	$(MAKE) --no-print-directory latex

# The PDF from the notebooks already in $(PM_OUT).
latex: $(SETUP) tex
	rm -rf $(BUILD)/pdf
	$(call book_from,$(PM_OUT),$(BUILD)/src,main,$(CURDIR),--builder pdflatex)
	$(PY) tests/browser/check_pdf.py --log $(BUILD)/latex/book.log --overfull-max $(OVERFULL_MAX) --overfull-pt $(OVERFULL_PT) $(BUILD)/latex/book.pdf
	mkdir -p $(BUILD)/pdf; cp $(BUILD)/latex/book.pdf $(BUILD)/pdf/book.pdf; echo "make pdf: OK -> $(BUILD)/pdf/book.pdf"

# --- benchmark and determinism -----------------------------------------------------------------

# Rewrites benchmarks/results/ (verify_large.json, rank_speed.json and the figures; commit them:
# the reproducibility page shows them). Heavy: ~35 minutes of both cores.
bench: $(SETUP)
	$(MPL_SCRIPTS) $(PY) benchmarks/verify_large.py
	$(MPL_SCRIPTS) $(PY) benchmarks/rank_speed.py
	$(MPL_SCRIPTS) $(PY) benchmarks/verify_block.py

# Mutation testing of the core modules (pyproject.toml [tool.mutmut]; hours on 2 cores), then the
# score and every survivor with its reason -> benchmarks/results/mutation.{json,md}. MODULES: the
# modules mutated in this run (default all six); the others are carried from the previous report
# (their sources must be unchanged since its run), their unexplained survivors re-run first
# against today's tests (benchmarks/mutation_recheck.py).
CORE_MODULES := attention certify counting fastrank rank symmetry
MODULES ?= $(CORE_MODULES)
CARRIED = $(filter-out $(MODULES),$(CORE_MODULES))
mutation: $(SETUP)
	rm -rf mutants
	$(MPL_SCRIPTS) $(BIN)/mutmut run --max-children 2 $(foreach m,$(MODULES),'idlib.$(m).*')
	mkdir -p $(BUILD)
	echo '{}' > $(BUILD)/rechecked.json
	$(if $(CARRIED),$(MPL_SCRIPTS) $(PY) benchmarks/mutation_recheck.py benchmarks/results/mutation.json $(BUILD)/rechecked.json $(CARRIED))
	$(PY) benchmarks/mutation_report.py . $(BUILD)/rechecked.json

# Two independent executions of every chapter (papermill, profile $(PROFILE)); their text
# outputs must be identical after the nbval_sanitize.cfg rules.
determinism: $(SETUP)
	rm -rf $(BUILD)/determinism
	$(MPL_KERNEL) $(PY) benchmarks/run_chapters.py --profile "$(PROFILE)" --out $(BUILD)/determinism/run1 $(CHAPTERS)
	$(MPL_KERNEL) $(PY) benchmarks/run_chapters.py --profile "$(PROFILE)" --out $(BUILD)/determinism/run2 $(CHAPTERS)
	$(PY) benchmarks/compare_outputs.py --sanitize nbval_sanitize.cfg $(BUILD)/determinism/run1 $(BUILD)/determinism/run2

# --- cleaning ----------------------------------------------------------------------------

clean:
	rm -rf $(BUILD) .pytest_cache
	find . -path ./$(VENV) -prune -o \( -name __pycache__ -o -name .ipynb_checkpoints \) -type d -print0 | xargs -0 rm -rf

distclean: clean
	rm -rf $(VENV)
