"""What the docs' runnable Python blocks stand on (check-doc-blocks.py,
`<!-- doc-block: python run setup=NAME -->`): each function returns the
names the text around its blocks speaks of."""
import torch


class TinyGPT(torch.nn.Module):
    """A small causal language model: an embedding, one transformer block,
    a norm and an output head."""

    def __init__(self, vocab=64, d=32, heads=4, context=16):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, d)
        self.blocks = torch.nn.ModuleList([torch.nn.TransformerEncoderLayer(
            d, heads, 4 * d, dropout=0.0, batch_first=True)])
        self.norm = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, vocab, bias=False)

    def forward(self, tokens):
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def gpt():
    """model, data (4 batches of (x, y)), loss(logits, y), and the usual
    split as two lists: hidden (the blocks' matrices), others."""
    torch.manual_seed(0)
    model = TinyGPT()
    g = torch.Generator().manual_seed(1)
    data = []
    for _ in range(4):
        tokens = torch.randint(0, 64, (4, 17), generator=g)
        data.append((tokens[:, :-1], tokens[:, 1:]))

    def loss(logits, y):
        return torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), y.reshape(-1))

    hidden = [p for n, p in model.named_parameters()
              if p.ndim >= 2 and n.startswith("blocks.")]
    others = [p for n, p in model.named_parameters()
              if not (p.ndim >= 2 and n.startswith("blocks."))]
    return {"torch": torch, "model": model, "data": data, "loss": loss,
            "hidden": hidden, "others": others}
