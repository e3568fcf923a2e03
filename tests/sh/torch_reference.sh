# mpiddp's loss, gradients and AdamW steps equal PyTorch's on the same parameters and packed batch.
. "$(dirname "$0")/lib.sh"
"$TESTTOOL" refdump ref.h5
$PY "$SRC/tests/py/torch_reference.py" ref.h5
