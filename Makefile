# Convenience targets; the README's commands work without make.
SEEDS ?= 200
FAULTS ?= leader,nats,node-kill,node-stop

RUNSIM_SEEDS ?= 20000

.PHONY: test lint chaos compose-build e2e runsim dashboard-big

test: ## the CI test command
	bash scripts/test.sh

lint: ## go vet and staticcheck (installed, pinned, from the module proxy)
	bash scripts/lint.sh

e2e: ## loopback and compose tiers only
	go test -count=1 -timeout 30m ./e2e/

chaos: ## many chaos seeds: make chaos SEEDS=200; figures in build/chaos.jsonl(.md)
	mkdir -p build && rm -f build/chaos.jsonl build/chaos.jsonl.md
	HETFLOW_CHAOS_SEEDS=$(SEEDS) HETFLOW_CHAOS_FAULTS=$(FAULTS) HETFLOW_CHAOS_OUT=$(CURDIR)/build/chaos.jsonl \
		go test -count=1 -timeout 0 -run 'TestLoopbackChaos$$' ./e2e/
	cat build/chaos.jsonl.md

runsim: ## the run-protocol simulation over many seeds: make runsim SEEDS=20000 (FIRST=N moves the range)
	HETFLOW_RUNSIM_SEEDS=$(if $(filter command line,$(origin SEEDS)),$(SEEDS),$(RUNSIM_SEEDS)) HETFLOW_RUNSIM_FIRST=$(or $(FIRST),1) \
		go test -count=1 -timeout 0 -v -run 'TestSimulation$$' ./cluster/runsim/

compose-build: ## static binaries and the hetflow:dev image
	bash scripts/compose-build.sh

dashboard-big: ## the browser test with a 100,000-task run drawn (CI draws 600)
	HETFLOW_DASHBOARD_BIG=1 go test -count=1 -timeout 30m -v -run 'TestDashboardInHeadlessChromium$$' ./e2e/
