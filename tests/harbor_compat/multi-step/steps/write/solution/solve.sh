#!/bin/bash
echo one > /app/notes.txt
