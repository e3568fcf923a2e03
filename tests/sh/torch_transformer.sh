# The Transformer encoder's loss, every gradient and two AdamW steps equal PyTorch's nn.TransformerEncoder
# (float64, zero-padded batch with src_key_padding_mask) on the same parameters and packed batch: lengths
# 1..64 with 1-row samples, d = 24, with learned positions and without, with each CPU attention method.
. "$(dirname "$0")/lib.sh"
for method in fused gemm; do
  MPIDDP_ATTENTION=$method "$TX_REFERENCE" tx_$method.h5
  $PY "$SRC/tests/py/torch_transformer.py" tx_$method.h5 | tail -1
done
"$TX_REFERENCE" tx_nopos.h5 --positions 0
$PY "$SRC/tests/py/torch_transformer.py" tx_nopos.h5 | tail -1
