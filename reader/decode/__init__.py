"""Decoding: video frames with torchcodec (`video`), depth cameras with PyAV (`depth`), image columns with
PIL (`images`), and `Frames`, what every decoder returns (`frames`). Importing this folder loads nothing."""
