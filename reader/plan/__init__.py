"""The read plan, torch-free: what a stream reads (`spec`: `ReadSpec`, `SourceSpec`), each dataset opened
once (`source`: `OpenedSource`), the plan built from them (`read_plan`: selection and schedule), the delta
windows in frames (`windows`), the files that plan needs and when (`fetch`, for prewarm and the stream),
and the arithmetic of a resume (`resume`). Prewarm builds the same plan as the stream; nothing here imports
torch or decodes."""
