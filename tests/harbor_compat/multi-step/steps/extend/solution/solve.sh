#!/bin/bash
echo two >> /app/notes.txt
