"""The read plan, torch-free: what a stream reads (`spec`: `ReadSpec`, `SourceSpec`), the plan built from it
(`read_plan`: catalogs, selection and schedule), the files that plan needs and when (`fetch`, for prewarm and
the stream), and the arithmetic of a resume (`resume`). Prewarm builds the same plan as the stream; nothing
here imports torch or decodes."""
