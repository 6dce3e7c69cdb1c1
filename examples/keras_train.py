"""A small Keras model trained with ``fit``: stepscope marks each training batch.

    stepscope profile -- python examples/keras_train.py --epochs 2
"""

import argparse

import keras
import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((512, 32)).astype("float32")
    y = (x.sum(axis=1) > 0).astype("float32")
    model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer="sgd", loss="binary_crossentropy")
    history = model.fit(x, y, batch_size=64, epochs=args.epochs, verbose=0)
    print(f"final loss {history.history['loss'][-1]:.4f}")


if __name__ == "__main__":
    main()
