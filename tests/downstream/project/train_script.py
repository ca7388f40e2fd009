"""A small outside project, run by tests/downstream/test_outside_project.py with the installed wheel only: its own
LightningModule (lightning.pytorch, ``(x, y)`` batches, ``forward`` returning embeddings) fitted by its own Hydra app,
whose config adds the retrieval callback the package ships. It writes the validation embeddings of the fitted model
beside the run, for an independent computation of what the callback logged."""

from pathlib import Path

import hydra
import lightning.pytorch as L
import numpy as np
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.utils import instantiate
from lightning.pytorch.loggers import CSVLogger
from torch.utils.data import DataLoader, TensorDataset


class Encoder(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
        self.head = torch.nn.Linear(8, 4)

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.head(self(x)), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.cross_entropy(self.head(self(x)), y))

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-2)


def split(generator: torch.Generator, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` points of 4 noisy classes in 16 dimensions."""
    y = torch.arange(n) % 4
    centres = torch.eye(16)[:4] * 1.5
    return centres[y] + torch.randn(n, 16, generator=generator), y


@hydra.main(version_base="1.3", config_path="configs", config_name="train")
def main(cfg):
    L.seed_everything(cfg.seed)
    run = HydraConfig.get().runtime.output_dir
    generator = torch.Generator().manual_seed(cfg.seed)
    train, val = split(generator, 256), split(generator, 96)
    callbacks = [instantiate(node) for node in cfg.callbacks.values()]
    trainer = L.Trainer(
        default_root_dir=run,
        max_epochs=cfg.max_epochs,
        logger=CSVLogger(run),
        callbacks=callbacks,
        enable_progress_bar=False,
        enable_checkpointing=False,
        log_every_n_steps=4,
    )
    model = Encoder()
    trainer.fit(
        model,
        DataLoader(TensorDataset(*train), batch_size=32, shuffle=True),
        DataLoader(TensorDataset(*val), batch_size=32),
    )
    model.eval()
    with torch.no_grad():
        embeddings = model(val[0])
    np.savez(Path(run) / "val_embeddings.npz", embeddings=embeddings.numpy(), labels=val[1].numpy())
    print(f"run folder: {run}")


if __name__ == "__main__":
    main()
