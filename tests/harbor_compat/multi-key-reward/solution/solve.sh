#!/bin/bash
echo fast > /app/answer.txt
