# One target per task; each installs what it needs first.
.PHONY: install test check demo conformance bench bench-full bench-copy bench-lfn bench-start bench-coordinator bench-equalizer fmt clean

STAMP := .venv/.installed
SOURCES_FOR_INSTALL := pyproject.toml constraints.txt setup.py scripts/install.sh $(wildcard agent/storage/*.c) \
	$(wildcard lab/delayline/*.c) $(wildcard kmod-pacing/pacing/bpf/*.c) \
	web/package-lock.json web/build.mjs $(wildcard web/src/* web/src/views/*)

install:            ## Debian packages, .venv with reservoir, C extension built
	scripts/install.sh

$(STAMP): $(SOURCES_FOR_INSTALL)
	scripts/install.sh

test: $(STAMP)      ## unit, integration (real peers on loopback) and bounded fuzz tests
	scripts/test.sh

check: $(STAMP)     ## ruff lint, ruff format --check, mypy strict
	scripts/check.sh

demo: $(STAMP)      ## a verified transfer through the coordinator over an emulated LFN, dashboard on 127.0.0.1:8470
	scripts/demo.sh

conformance: $(STAMP)  ## iscsi-test-cu and iscsi-perf: our target against tgt, same run
	.venv/bin/python -m reservoir.lab.compare_targets

bench: $(STAMP)     ## the quick subset of every shipped campaign: design.md section 6 figures (~17 min)
	.venv/bin/python -m reservoir.campaigns.bench

bench-full: $(STAMP) ## every shipped campaign's whole matrix with its repetitions, then the section 6 figures (~3.5 h)
	.venv/bin/python -m reservoir.campaigns.bench --full

bench-copy: $(STAMP)  ## reservoir copy on loopback against iperf3, and into tgt (a benchmark)
	.venv/bin/python -m reservoir.lab.bench_copy

bench-lfn: $(STAMP) ## reservoir copy on the emulated 2 x 500 Mbit/s, 100 ms LFN: iperf3, failover, MPTCP, kill
	.venv/bin/python -m reservoir.lab.bench_lfn

bench-start: $(STAMP) ## a copy's start on the emulated LFN, cold then warm (pooled sessions): time to first byte and to 90% of the bottleneck
	.venv/bin/python -m reservoir.lab.bench_start

bench-coordinator: $(STAMP) ## transfers through the coordinator's API on the emulated LFN: end to end, coordinator killed
	.venv/bin/python -m reservoir.lab.bench_coordinator

bench-equalizer: $(STAMP)  ## 16 streams, 60 and 200 ms paths, one shared bottleneck: equalizer off/on vs iperf3
	.venv/bin/python -m reservoir.lab.bench_equalizer

fmt: $(STAMP)
	.venv/bin/ruff format reservoir agent lab server kmod-pacing campaigns config web scripts tests setup.py
	.venv/bin/ruff check --fix reservoir agent lab server kmod-pacing campaigns config web scripts tests setup.py

clean:
	rm -rf build *.egg-info .mypy_cache .ruff_cache .pytest_cache agent/storage/*.so
