"""crucible tasks/capture: records real inputs and outputs of vLLM-style ops from a model run.

    python3 -m tasks.capture                       # stories260K on CPU -> tasks/capture/cases/
    python3 -m tasks.capture --model /path/to/hf/checkpoint --out /tmp/cases --device cuda
    python3 -m tasks.capture.onnx_capture          # PP-OCRv4 (RapidOCR's wheel) -> cases/pp_ocrv4/

See docs/capture.md for the output format and the provenance record.
"""
