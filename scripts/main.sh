#!/usr/bin/env bash
# README command 1: install what is missing, build, and train the default MLP on Fashion-MNIST.
# Arguments go to scripts/fmnist_mlp.lua (e.g. --epochs=3 --seed=1).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
exec build/lamp scripts/fmnist_mlp.lua "$@"
