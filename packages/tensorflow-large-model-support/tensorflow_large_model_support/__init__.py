"""TFLMSv2's user surface on lmsforge's TensorFlow LMS (see README.md beside this package).

TFLMSv2 (IBM PowerAI 1.6, TensorFlow 1.x) rewrote the graph; lmsforge's TensorFlow LMS pages
tensors in the GPU allocator instead. This package keeps TFLMSv2's names, arguments and messages,
so a user's script runs unchanged, and maps each one onto the allocator's LMS.
"""
