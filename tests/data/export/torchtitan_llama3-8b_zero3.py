# torchtitan head Python config (Trainer.Config) for llama3-8b on dgx-h100: 16 GPUs (2 nodes x 8),
# written by `trainplan export`.
# plan: tp=1 pp=1 dp=16 cp=1 vp=1 zero=3 shard=8 mbs=2 gbs=128 seq=8192 recompute=full sp=off schedule=1f1b precision=bf16 grad_dtype=fp32 attention=flash offload=none
# transformer layers per pipeline stage: 32
# For torchtitan at head (commit b5bcd76c, 2026-08-21) and 0.3, which take a Python
# Trainer.Config instead of TOML.  Save this file as trainplan_job.py on PYTHONPATH and
# run on each of the 2 nodes:
#   torchrun --nproc_per_node 8 --nnodes 2 --node_rank $NODE_RANK --rdzv_backend c10d \
#     --rdzv_endpoint $MASTER_ADDR:29500 -m torchtitan.train --module trainplan_job --config trainplan_job
# Set hf_assets_path (the folder with the tokenizer) and the dataset (c4 here, as
# torchtitan's llama3 configs) for your data.

from torchtitan.components.data import ConcatThenSplitPackingConfig, GrainDataLoader
from torchtitan.components.loss import CrossEntropyLoss
from torchtitan.components.optimizer import LRSchedulersContainer, default_adamw
from torchtitan.config import CompileConfig, ParallelismConfig, TrainingConfig
from torchtitan.distributed.activation_checkpoint import FullAC
from torchtitan.hf_datasets.text_datasets import DATASETS
from torchtitan.models.common.config_utils import decoder_vocab_size
from torchtitan.models.llama3 import model_registry
from torchtitan.trainer import Trainer


def trainplan_job() -> Trainer.Config:
    model_spec = model_registry("8B")
    return Trainer.Config(
        model_spec=model_spec,
        loss=CrossEntropyLoss.Config(global_vocab_size=decoder_vocab_size(model_spec)),
        dataloader=GrainDataLoader.Config(dataset=ConcatThenSplitPackingConfig(dataset=DATASETS["c4"])),
        hf_assets_path="./assets/hf/Llama-3.1-8B",
        dump_folder="./outputs",
        optimizer=default_adamw(lr=3.0e-4),
        lr_scheduler=LRSchedulersContainer.Config(warmup_steps=100),
        training=TrainingConfig(
            # mbs 2 x seq 8192 tokens per micro-batch; gbs 128 sequences per step.
            num_tokens_per_microbatch_per_dp_rank=16384,
            num_tokens_per_train_step=1048576,
            max_context_length=8192,
            max_norm=1.0,
            steps=1000,
            mixed_precision_param="bfloat16",
            mixed_precision_reduce="float32",
            enable_cpu_offload=False,
            disable_cuda_graphs=False,
        ),
        parallelism=ParallelismConfig(
            data_parallel_replicate_degree=2,
            data_parallel_shard_degree=8,
            # ZeRO-3: free gathered parameters after forward, gather again in backward.
            fsdp_reshard_after_forward="always",
            tensor_parallel_degree=1,
            enable_sequence_parallel=True,
            pipeline_parallel_degree=1,
            context_parallel_degree=1,
        ),
        compile=CompileConfig(enable=False),
        activation_checkpoint=FullAC.Config(),
    )
