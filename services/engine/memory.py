"""Device-memory budget: weights + KV pool + each step's activations.

vLLM sizes the KV pool from what is left of `gpu_memory_utilization x capacity`
after the weights and a profiled activation peak; whatever the step actually
needs beyond that is the headroom. When a step would exceed the capacity we
raise an out-of-memory error, as the CUDA allocator would. On CUDA the
capacity is the device's; on CPU it is configured (there is no allocator to ask).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


class DeviceOutOfMemoryError(RuntimeError):
    """A step needs more device memory than is left."""


@dataclass
class MemoryPlan:
    capacity_bytes: int
    weights_bytes: int
    profiled_activation_bytes: int
    kv_block_bytes: int
    num_blocks: int

    @property
    def kv_pool_bytes(self) -> int:
        return self.num_blocks * self.kv_block_bytes


class DeviceMemory:
    def __init__(self, device: torch.device, configured_capacity: int):
        self.device = device
        if device.type == "cuda":
            self.capacity_bytes = torch.cuda.get_device_properties(device).total_memory
        else:
            self.capacity_bytes = configured_capacity
        self.weights_bytes = 0
        self.kv_pool_bytes = 0
        self.step_activation_bytes = 0
        self.peak_activation_bytes = 0

    def plan(self, weights_bytes: int, profiled_activation_bytes: int, kv_block_bytes: int,
             utilization: float, num_blocks_override: int | None) -> MemoryPlan:
        if num_blocks_override is not None:
            num_blocks = num_blocks_override
        else:
            free = int(utilization * self.capacity_bytes) - weights_bytes - profiled_activation_bytes
            num_blocks = free // kv_block_bytes
            if num_blocks < 1:
                raise ValueError(
                    f"gpu_memory_utilization={utilization} leaves no room for the KV cache: capacity "
                    f"{self.capacity_bytes} B, weights {weights_bytes} B, activations {profiled_activation_bytes} B")
        plan = MemoryPlan(self.capacity_bytes, weights_bytes, profiled_activation_bytes, kv_block_bytes, num_blocks)
        if weights_bytes + plan.kv_pool_bytes > self.capacity_bytes:
            raise ValueError(f"num_gpu_blocks={num_blocks} needs {plan.kv_pool_bytes} B of KV cache; "
                             f"only {self.capacity_bytes - weights_bytes} B of device memory are left")
        self.weights_bytes, self.kv_pool_bytes = weights_bytes, plan.kv_pool_bytes
        return plan

    def reserve_step(self, activation_bytes: int) -> None:
        """Account one step's activations; raise if they do not fit."""
        needed = self.weights_bytes + self.kv_pool_bytes + activation_bytes
        if needed > self.capacity_bytes:
            raise DeviceOutOfMemoryError(
                f"out of device memory: step needs {activation_bytes} B of activations, "
                f"{self.capacity_bytes - self.weights_bytes - self.kv_pool_bytes} B free "
                f"(capacity {self.capacity_bytes} B)")
        self.step_activation_bytes = activation_bytes
        self.peak_activation_bytes = max(self.peak_activation_bytes, activation_bytes)

    def release_step(self) -> None:
        self.step_activation_bytes = 0

    @property
    def used_bytes(self) -> int:
        if self.device.type == "cuda":
            return torch.cuda.memory_allocated(self.device)
        return self.weights_bytes + self.kv_pool_bytes + self.step_activation_bytes
