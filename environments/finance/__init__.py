"""Financial documents: published question sets (FinQA, TAT-QA, ConvFinQA) and
generated PDF annual reports, with the grading they share.

`numbers` (reading and comparing numbers as reports write them), `answers`
(references and grades), `program` (FinQA's reasoning programs), `sources`
(the published files), `reports` (a report's content), `questions` (what is
asked about it), `pdf` (its layout and the text read back). The domains are
registered by `environments.families.finance`.
"""
