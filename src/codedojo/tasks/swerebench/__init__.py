"""SWE-rebench V2 (`nebius/SWE-rebench-V2`) as Harbor tasks.

`convert` turns dataset rows into task directories that run on the dataset's prebuilt images;
`grade.awk` parses test logs with the dataset's parser names and writes the reward, inside the image
or, through `grading`, on the host. See docs/swe-rebench.md.
"""
