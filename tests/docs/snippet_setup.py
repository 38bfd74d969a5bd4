"""What the docs' code fragments take as given, run before each page's blocks (see
test_code_blocks.py): a small dataset, loader and model, so that a fragment such as
``fastload.DataLoader(dataset, ...)`` runs as the reader would run it in their own script."""

import torch

import fastload
from fastload import transforms as T

SIZE = 64
dataset = train = fastload.ImageFolder("data/train", transform=T.RandomResizedCrop(SIZE))
val = fastload.ImageFolder("data/val", transform=T.Compose([T.Resize(72), T.CenterCrop(SIZE)]))
loader = fastload.DataLoader(train, batch_size=16, shuffle=True)
val_loader = fastload.DataLoader(val, batch_size=16)
mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
epochs = 1


class Net(torch.nn.Module):
    """A linear classifier on uint8 or float images, as small as a step can be."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(3 * SIZE * SIZE, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.float() / 255 if x.dtype == torch.uint8 else x
        return self.fc(x.flatten(1))


model = Net()
optimizer = torch.optim.AdamW(model.parameters())
trainer = fastload.train.Trainer(model, optimizer)
