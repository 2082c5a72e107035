"""What a resume needs, torch-free, with one entry point: `resumption.Resumption`, which `EpisodeStream` calls
to load a state, to start an iteration where it says, and to write states (the running iteration's
`IterationCursor` included). Behind it: the state a stream saves, how it is parsed and checked, and the
rest of an epoch after earlier runs (`state`), and the DataLoader batch arithmetic that turns batches
consumed into samples per worker (`loader_math`). The rest-of-epoch order itself is the schedule's
(`reader.schedule.rest`): it runs the schedule's own machinery over the epoch's remaining frames."""
