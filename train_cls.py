"""Train or test a classifier from YAML configs (a LightningCLI; see configs/ and the README).

python train_cls.py fit --config configs/quickstart.yaml
python train_cls.py fit --config configs/cifar10/resnet56.yaml --config configs/attention/se.yaml
python train_cls.py test --config CONFIG --ckpt_path PATH
"""

from visattn.training.cli import cli_main

if __name__ == "__main__":
    cli_main()
