"""Dispatch (RocketMQ's ReputMessageService): from the new part of the commitlog, the consume queue,
ext (with CalcBitMap's filter bitmaps) and index rows, each table committed with its own marker."""
