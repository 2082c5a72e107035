"""What a resume needs, torch-free: the state a stream saves and how it is parsed and checked (`state`), and
the DataLoader batch arithmetic that turns batches consumed into samples per worker (`loader_math`)."""
