# Convenience targets; the README's commands work without make.
SEEDS ?= 200
FAULTS ?= leader,nats,node-kill,node-stop

.PHONY: test chaos compose-build e2e

test: ## the CI test command
	bash scripts/test.sh

e2e: ## loopback and compose tiers only
	go test -count=1 -timeout 30m ./e2e/

chaos: ## many chaos seeds: make chaos SEEDS=200; figures in build/chaos.jsonl(.md)
	mkdir -p build && rm -f build/chaos.jsonl build/chaos.jsonl.md
	HETFLOW_CHAOS_SEEDS=$(SEEDS) HETFLOW_CHAOS_FAULTS=$(FAULTS) HETFLOW_CHAOS_OUT=$(CURDIR)/build/chaos.jsonl \
		go test -count=1 -timeout 0 -run 'TestLoopbackChaos$$' ./e2e/
	cat build/chaos.jsonl.md

compose-build: ## static binaries and the hetflow:dev image
	bash scripts/compose-build.sh
