#!/usr/bin/env bash
# One node's `lrs prewarm`, which train.sbatch runs once per node before training:
#   srun --ntasks-per-node=1 --ntasks="$SLURM_JOB_NUM_NODES" prewarm_node.sh
# It fetches into CACHE_DIR what this node's ranks read first, in the order they read it. The node count
# and this node's rank are SLURM's for the step (SLURM_NNODES, SLURM_NODEID); NNODES and NODE_RANK, when
# set, stand for them (the tests emulate two nodes on one machine so). Ranks per node, DataLoader workers,
# batch size and seed must be training's: RANKS_PER_NODE, NUM_WORKERS, BATCH_SIZE, SEED.
set -euo pipefail
exec lrs prewarm "$DATASET" --cache-dir "$CACHE_DIR" --nnodes "${NNODES:-$SLURM_NNODES}" \
  --node-rank "${NODE_RANK:-$SLURM_NODEID}" --nproc-per-node "$RANKS_PER_NODE" --num-workers "$NUM_WORKERS" \
  --batch-size "$BATCH_SIZE" --seed "$SEED" --quiet
