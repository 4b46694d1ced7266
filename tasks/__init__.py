# SPDX-License-Identifier: Apache-2.0
"""The template's automation, behind thin sessions in ``noxfile.py``.

- ``variants``: the sample backends and option combinations, declared once, as data;
- ``checks``: what a render and its wheel must pass (shared with the template's tests);
- ``envs``: one environment per LMCache release, shared by every session that uses it;
- ``project``: render, check, build and install one variant;
- ``suite``: run a rendered suite and count it;
- ``prove``, ``matrix``: the end-to-end proof of the variants, and the option matrix;
- ``progress``: step announcements and each session's timing table.
"""
