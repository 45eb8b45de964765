#!/usr/bin/env bash
# Megatron-LM pretraining for llama3-8b on dgx-h100: 8 GPUs (1 node x 8),
# written by `trainplan export`.
# plan: tp=2 pp=2 dp=2 cp=1 vp=1 zero=1 shard=2 mbs=1 gbs=64 seq=8192 recompute=selective sp=on schedule=1f1b precision=bf16 grad_dtype=fp32 attention=flash offload=none
# transformer layers per pipeline stage: 16 16
# Run it from a Megatron-LM checkout.
# Trains on mock data; replace DATA_ARGS with --data-path and a tokenizer for a
# real run.
set -euo pipefail

# Tensor and context parallelism need one hardware queue per GPU so that
# communication and compute kernels keep their order (arguments.py checks it).
export CUDA_DEVICE_MAX_CONNECTIONS=1

DISTRIBUTED_ARGS=(
  --nproc_per_node 8
  --nnodes 1
  --node_rank "${NODE_RANK:-0}"
  --master_addr "${MASTER_ADDR:-localhost}"
  --master_port "${MASTER_PORT:-6000}"
)

MODEL_ARGS=(
  --num-layers 32
  --hidden-size 4096
  --ffn-hidden-size 14336
  --num-attention-heads 32
  --group-query-attention
  --num-query-groups 8
  --seq-length 8192
  --max-position-embeddings 8192
  --position-embedding-type rope
  --swiglu
  --disable-bias-linear
  --normalization RMSNorm
  --untie-embeddings-and-output-weights
  --attention-dropout 0.0
  --hidden-dropout 0.0
  --attention-backend auto
)

PARALLEL_ARGS=(
  --tensor-model-parallel-size 2
  --pipeline-model-parallel-size 2
  --context-parallel-size 1
  --sequence-parallel
  --use-distributed-optimizer
  --overlap-grad-reduce
)

TRAINING_ARGS=(
  --micro-batch-size 1
  --global-batch-size 64
  --bf16
  --recompute-granularity selective
  --train-iters 1000
  --lr 3.0e-4
  --min-lr 3.0e-5
  --lr-decay-style cosine
  --lr-warmup-iters 100
  --weight-decay 0.1
  --adam-beta1 0.9
  --adam-beta2 0.95
  --clip-grad 1.0
  --init-method-std 0.02
  --log-interval 10
  --eval-iters 0
)

DATA_ARGS=(
  --mock-data
  --tokenizer-type NullTokenizer
  --vocab-size 128255
  --make-vocab-size-divisible-by 128
)

torchrun "${DISTRIBUTED_ARGS[@]}" pretrain_gpt.py \
  "${MODEL_ARGS[@]}" \
  "${PARALLEL_ARGS[@]}" \
  "${TRAINING_ARGS[@]}" \
  "${DATA_ARGS[@]}" \
  "$@"
