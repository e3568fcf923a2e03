# The Transformer encoder's loss, every gradient and two AdamW steps equal PyTorch's nn.TransformerEncoder
# (float64, zero-padded batch with src_key_padding_mask) on the same parameters and packed batch: lengths
# 1..64 with 1-row samples, d = 24, with learned positions and without.
. "$(dirname "$0")/lib.sh"
"$TX_REFERENCE" tx.h5
$PY "$SRC/tests/py/torch_transformer.py" tx.h5
"$TX_REFERENCE" tx_nopos.h5 --positions 0
$PY "$SRC/tests/py/torch_transformer.py" tx_nopos.h5
